"""SQLite on the VFS `nvarray` where it can lose data: pools that fill, transactions larger
than the library's log, kill -9, power cuts, and pool files renamed, linked and copied between
runs. Driven by tests/sqlite_vfs.rs and `scripts/campaign.sh pm-sqlite-pools` (issue 55).

usage:
  sqlite_pools.py VFS_LIB PM_LIB DIR write-paths
  sqlite_pools.py VFS_LIB PM_LIB DIR campaign FIRST_SEED STEPS
  sqlite_pools.py VFS_LIB PM_LIB DIR writer SETTINGS_JSON    (a kill step's child)

The reference. Every workload is a list of numbered transactions, each a deterministic
function of (seed, number): rows inserted with payloads drawn from the seed, rows updated or
deleted by key, an index built or dropped, a VACUUM, a large blob, or a transaction that ends in
ROLLBACK. A transaction either commits, or is refused whole with SQLITE_FULL (a full pool, or
one larger than the library's log: docs/sqlite.md, "Limits"), or is rolled back; anything else
is a failure. After each, the database must hold exactly what the committed transactions
applied to an in-memory SQLite database (the default VFS) hold: every row, every payload, the
indexes and the counter, compared by digest, and `integrity_check` must pass.

write-paths: every SQLite write path (insert, update, VACUUM, index build, a 100 MiB blob), in
every journal mode (delete, truncate, persist, memory, off), against a pool one page too small
for it and against a log a quarter of which is too small for it. Each case runs once on a
pool large enough, to learn the size it needs, then on the tight one, where at least one
transaction must be refused whole.

campaign: STEPS steps over seeded lives of one database each. A file life takes steps of
transactions in-process, kill -9 of a child writer at a random moment (its reopen then checks
that the state is that of the last acknowledged transaction or of the one in flight), renames
and hard links of the pool file after a kill (before any reopen: the dead process's state must
follow the file, never be replayed over newer commits), and copies after a clean close (the
copy is a database of its own). A power life runs its workload on the library's simulated pool
and cuts power at a seeded operation (nv_sim_*). Random pool sizes (16 KiB to 4 MiB), log
sizes, journal modes, synchronous and cache settings. Prints one JSON line of counts, or on
the first failure {"failure": "...", "replay": "..."} and exits 1.
"""

import ctypes
import functools
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys

MODES = ["delete", "truncate", "persist", "memory", "off"]
FULL = "database or disk is full"
NEVER = 2**64 - 1

vfs_lib, pm_lib, scratch, command = sys.argv[1:5]
assert ctypes.CDLL(vfs_lib).nvarray_sqlite_register() == 0
pm = ctypes.CDLL(pm_lib)
pm.nv_sim_start.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
pm.nv_sim_ops.restype = ctypes.c_uint64
pm.nv_sim_recoveries.restype = ctypes.c_uint64
pm.nv_last_error.restype = ctypes.c_char_p
# The VFS says why it refused on stderr; the counts here are the point.
os.environ["NVARRAY_SQLITE_QUIET"] = "1"


class Failure(Exception):
    pass


# ---- the workload ----------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def payload(seed, key, version, size):
    # (Kept: the database and its reference take the same 100 MiB blob, a second to draw.)
    return random.Random(seed * 1_000_003 + key * 1_009 + version).randbytes(size)


def transaction(seed, n, kinds, blob_bytes, row_max):
    """Transaction n of seed's workload: (kind, statements). Statements are (sql, params);
    a "vacuum" transaction's VACUUM runs on its own before the counter's update."""
    if n == 0:
        return "schema", [
            ("create table t(i integer primary key, pad blob)", ()),
            ("create table meta(k integer primary key, last integer)", ()),
            ("insert into meta values (0, 0)", ()),
        ]
    r = random.Random(seed * 7_919 + n)
    kind = r.choice(kinds)
    if kind in ("insert", "rollback"):
        rows = r.randrange(1, 8)
        stmts = [("insert into t values (?, ?)",
                  (n * 100 + j, payload(seed, n * 100 + j, 0, r.randrange(100, row_max))))
                 for j in range(rows)]
    elif kind == "update":
        m = r.randrange(2, 6)
        stmts = [("update t set pad = ? where i % ? = ?",
                  (payload(seed, n, 1, r.randrange(100, row_max)), m, r.randrange(m)))]
    elif kind == "delete_group":
        # The rows transaction n - 60 inserted: a page or two, so a small log takes it.
        stmts = [("delete from t where i >= ? and i < ?", ((n - 60) * 100, (n - 59) * 100))]
    elif kind == "delete":
        m = r.randrange(2, 5)
        stmts = [("delete from t where i % ? = ?", (m, r.randrange(m)))]
    elif kind == "index":
        stmts = [("create index if not exists tpad on t(pad)", ()) if r.random() < 0.7
                 else ("drop index if exists tpad", ())]
    elif kind == "build_index":
        stmts = [("create index tpad on t(pad)", ())]
    elif kind == "vacuum":
        stmts = [("vacuum", ())]
    elif kind == "blob":
        stmts = [("insert into t values (?, ?)", (n * 100, payload(seed, n, 2, blob_bytes)))]
    elif kind == "bulk":
        stmts = [("insert into t values (?, ?)", (n * 1000 + j, payload(seed, n * 1000 + j, 0, 900)))
                 for j in range(300)]
    elif kind == "update_all":
        stmts = [("update t set pad = cast(? || pad as blob)", (payload(seed, n, 1, 1200),))]
    else:
        raise AssertionError(kind)
    return kind, stmts


def run(c, seed, n, kinds, blob_bytes, row_max):
    """Runs transaction n on connection c: "ok", "full" (refused whole) or "rolledback"."""
    kind, stmts = transaction(seed, n, kinds, blob_bytes, row_max)
    try:
        if kind == "vacuum":
            c.execute("vacuum")
            stmts = []
        c.execute("begin")
        for sql, params in stmts:
            c.execute(sql, params)
        if n > 0:
            c.execute("update meta set last = ? where k = 0", (n,))
        if kind == "rollback":
            c.execute("rollback")
            return "rolledback"
        c.execute("commit")
        return "ok"
    except sqlite3.OperationalError as e:
        if FULL not in str(e):
            raise Failure(f"transaction {n} ({kind}): {e}")
        if c.in_transaction:
            try:
                c.execute("rollback")
            except sqlite3.OperationalError:
                pass  # SQLite rolled back already
        return "full"


class Reference:
    """The committed transactions applied to an in-memory database (the default VFS)."""

    def __init__(self, seed, kinds, blob_bytes, row_max):
        self.args = (kinds, blob_bytes, row_max)
        self.seed = seed
        self.c = sqlite3.connect(":memory:", isolation_level=None)
        self.applied = []

    def apply(self, n):
        if run(self.c, self.seed, n, *self.args) != "ok":
            raise Failure(f"the reference could not apply transaction {n}")
        self.applied.append(n)

    def copy(self):
        other = Reference(self.seed, *self.args)
        self.c.backup(other.c)
        other.applied = list(self.applied)
        return other

    def digest(self):
        # Kept until the next transaction applied: checked after every one, and a digest of a
        # 100 MiB blob is a fifth of a second.
        if getattr(self, "digested", None) != len(self.applied):
            self.digested, self.last_digest = len(self.applied), digest(self.c)
        return self.last_digest


def digest(c):
    """Every row, payload, index and the counter, as one hash (tables that are not there
    count as empty: a pool too small for the schema holds none)."""
    h = hashlib.sha256()
    tables = {r[0] for r in c.execute("select name from sqlite_master where type = 'table'")}
    if "t" in tables:
        for i, pad in c.execute("select i, pad from t order by i"):
            h.update(i.to_bytes(8, "little", signed=True) + len(pad).to_bytes(8, "little") + pad)
    if "meta" in tables:
        h.update(repr(c.execute("select k, last from meta order by k").fetchall()).encode())
    indexes = c.execute("select name from sqlite_master where type = 'index' "
                        "and name not like 'sqlite_autoindex%' order by name").fetchall()
    h.update(repr(sorted(tables)).encode() + repr(indexes).encode())
    return h.hexdigest()


def uri(path, pool_size):
    return f"file:{path}?vfs=nvarray&pool_size={pool_size}"


def connect(path, s):
    c = sqlite3.connect(uri(path, s["pool_size"]), uri=True, isolation_level=None, timeout=30)
    c.execute(f"pragma journal_mode={s['journal']}")
    c.execute(f"pragma synchronous={s['synchronous']}")
    c.execute(f"pragma cache_size={s['cache_pages']}")
    if s.get("exclusive"):
        c.execute("pragma locking_mode=exclusive")
    return c


def check(c, ref, what):
    ok = c.execute("pragma integrity_check").fetchone()[0]
    if ok != "ok":
        raise Failure(f"{what}: integrity_check: {ok}")
    if digest(c) != ref.digest():
        raise Failure(f"{what}: the database is not the state of the committed transactions "
                      f"{ref.applied[-8:]} (last 8 shown)")


def header_bytes(path):
    """The database's size the VFS's header records (the committed size)."""
    with open(path, "rb") as f:
        head = f.read(16)
    return int.from_bytes(head[8:16], "little")


# ---- write-paths -------------------------------------------------------------------------

# Each write path as the transaction that takes it: 300 rows inserted at once, every row
# updated (each grows), a VACUUM, an index built over every row, one large blob.
PATHS = ["bulk", "update_all", "vacuum", "build_index", "blob"]
BLOB_POOL_BYTES = 100 << 20


def write_path(mode, path_kind, limit, pool_size, log_size):
    """One case: the schema, 60 small transactions (up to 7 rows each, every one logging well
    under 64 KiB) and 10 deleting the rows of one of them each (so VACUUM has pages to free),
    then the path's transaction and one more insert. Returns (the largest committed database size seen, the kinds of the transactions
    refused)."""
    blob = BLOB_POOL_BYTES if (path_kind == "blob" and limit == "pool") else (1 << 20)
    seed = 55 + PATHS.index(path_kind)  # one content in every mode: one size
    s = {"pool_size": pool_size, "journal": mode, "synchronous": "normal", "cache_pages": 16}
    dir_ = os.path.join(scratch, f"wp-{mode}-{path_kind}-{limit}-{pool_size}")
    # A 100 MiB transaction needs a 512 MiB log: in memory, as the NVM tier is by default.
    nvm = (os.path.join("/dev/shm", f"nvarray-wp-{os.getpid()}") if blob > (1 << 20) else dir_)
    for d in {dir_, nvm}:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    os.environ["NVARRAY_PM_NVM_DIR"] = nvm
    os.environ["NVARRAY_PM_LOG_SIZE"] = str(log_size)
    os.environ["NVARRAY_PM_CACHE_SIZE"] = str(max(log_size // 2, 1 << 20))
    db = os.path.join(dir_, "w.db")
    plan = ([(0, "schema")] + [(n, "insert") for n in range(1, 61)]
            + [(n, "delete_group") for n in range(61, 81, 2)]
            + [(100, path_kind), (101, "insert")])
    ref = Reference(seed, ["insert"], blob, 900)
    c = connect(db, s)
    peak, refused = 0, []  # peak: the database's size after the path's transaction
    for n, kind in plan:
        args = ([kind], blob, 900)
        what = f"write-paths {mode} {path_kind} ({limit} limit) transaction {n} ({kind})"
        result = run(c, seed, n, *args)
        if result == "ok":
            ref.args = args
            ref.apply(n)
        else:
            refused.append(kind)
        check(c, ref, what)
        if n == 100:
            peak = header_bytes(db)
    c.close()
    # A process of its own sees the same (nothing half-applied waits in a cache).
    out = subprocess.run([sys.executable, __file__, vfs_lib, pm_lib, scratch, "digest",
                          json.dumps({"db": db, **s})], capture_output=True, text=True)
    if out.returncode != 0 or out.stdout.split() != ["ok", ref.digest()]:
        raise Failure(f"write-paths {mode} {path_kind} ({limit}): reopened in another process: "
                      f"{out.stdout.strip()} {out.stderr.strip()[-300:]}")
    for d in {dir_, nvm}:
        shutil.rmtree(d)
    return peak, refused


def write_paths():
    cases = refused_total = 0
    needed = {}
    for mode in MODES:
        for path_kind in PATHS:
            # The pool one page too small: the size the case needs, found on a large pool.
            # (A database's pages are the same whatever its journal, so the 100 MiB blob's
            # size is learnt once.)
            big = (256 << 20) if path_kind == "blob" else (16 << 20)
            log_big = (512 << 20) if path_kind == "blob" else (16 << 20)
            if path_kind != "blob" or path_kind not in needed:
                peak, refused = write_path(mode, path_kind, "pool", big, log_big)
                if refused:
                    raise Failure(f"{mode} {path_kind}: refused on a pool of {big} bytes")
                needed[path_kind] = peak
                cases += 1
            peak = needed[path_kind]
            tight = 4096 + peak - 4096  # the header, then the database's size less one page
            _, refused = write_path(mode, path_kind, "pool", tight, log_big)
            if not refused:
                raise Failure(f"{mode} {path_kind}: nothing refused on a pool one page too "
                              f"small ({tight} bytes)")
            refused_total += len(refused)
            # A log a quarter of which (64 KiB) is less than the path's transaction.
            _, refused = write_path(mode, path_kind, "log", 16 << 20, 256 << 10)
            if path_kind not in refused:
                raise Failure(f"{mode} {path_kind}: not refused with a 256 KiB log "
                              f"(refused: {refused})")
            refused_total += len(refused)
            cases += 2
    print(json.dumps({"cases": cases, "refused": refused_total}), flush=True)


# ---- campaign ----------------------------------------------------------------------------

KINDS = ["insert"] * 5 + ["update"] * 2 + ["delete", "index", "vacuum", "blob", "rollback"]


def settings(r, power):
    pool = int(2 ** r.uniform(14, 22))  # 16 KiB .. 4 MiB
    return {
        "pool_size": pool,
        "journal": r.choice(MODES),
        "synchronous": r.choice(["off", "normal", "full"]),
        "cache_pages": r.choice([8, 16, 64, 2000]),
        "exclusive": (not power) and r.random() < 0.1,
        "log_size": r.choice([256 << 10, 1 << 20, 4 << 20]),
        "blob": r.choice([64 << 10, 256 << 10, 1 << 20]),
        "row_max": r.choice([500, 3000, 8000]),
    }


def library_env(s, nvm_dir):
    os.environ["NVARRAY_PM_NVM_DIR"] = nvm_dir
    os.environ["NVARRAY_PM_LOG_SIZE"] = str(s["log_size"])
    os.environ["NVARRAY_PM_CACHE_SIZE"] = str(max(s["log_size"], 1 << 20))


class Counts:
    def __init__(self):
        self.steps = self.transactions = self.refused = self.rolled_back = 0
        self.kills = self.cuts = self.renames = self.links = self.copies = 0

    def record(self, result, n, ref):
        """Transaction n ended with `result` ("ok", "full", or a rollback): counted, and
        applied to the reference when it committed."""
        self.transactions += 1
        if result == "ok":
            ref.apply(n)
        elif result == "full":
            self.refused += 1
        else:
            self.rolled_back += 1


def tx_args(s):
    return (KINDS, s["blob"], s["row_max"])


def new_life(seed, kind, power):
    """A life's random settings and its own directory (pool files and NVM tier), empty."""
    r = random.Random(seed)
    s = settings(r, power)
    life = os.path.join(scratch, f"{kind}-{seed}")
    shutil.rmtree(life, ignore_errors=True)
    os.makedirs(life)
    library_env(s, life)
    return r, s, life


def file_life(seed, steps, counts, replay):
    r, s, life = new_life(seed, "life", power=False)
    db = os.path.join(life, "a.db")
    ref = Reference(seed, *tx_args(s))
    c = connect(db, s)
    n = 0
    for step in range(steps):
        what = f"{replay}, step {step}"
        counts.steps += 1
        roll = r.random()
        if roll < 0.55:
            # Transactions in this process.
            for _ in range(r.randrange(1, 6)):
                result = run(c, seed, n, *tx_args(s))
                counts.record(result, n, ref)
                check(c, ref, f"{what}, transaction {n} ({result})")
                n += 1
        elif roll < 0.85:
            # kill -9 of a child writer at a random moment, then perhaps a rename or a hard
            # link before anyone reopens it.
            c.close()
            n, db = kill_step(seed, s, db, n, ref, r, counts, what)
            c = connect(db, s)
            if check_after_crash(c, ref, n, what):
                n += 1  # the one in flight had committed
        else:
            # A copy after a clean close is a database of its own.
            c.close()
            copy = os.path.join(life, f"copy-{step}.db")
            shutil.copy2(db, copy) if r.random() < 0.5 else shutil.copyfile(db, copy)
            counts.copies += 1
            cc = connect(copy, s)
            check(cc, ref, f"{what}: the copy")
            other = ref.copy()
            # Its own transaction (the schema, if the original has none yet).
            own = 10_000 + step if 0 in ref.applied else 0
            result = run(cc, seed, own, *tx_args(s))
            if result == "ok":
                other.apply(own)
            check(cc, other, f"{what}: the copy after a transaction of its own")
            cc.close()
            c = connect(db, s)
            check(c, ref, f"{what}: the original after a transaction on its copy")
    c.close()
    shutil.rmtree(life)


def kill_step(seed, s, db, n, ref, r, counts, what):
    """Runs a child writer from transaction n, kills it with SIGKILL after a random number of
    acknowledged transactions, applies what it acknowledged to the reference, and perhaps
    renames or links the file. Returns (the next transaction number, the file's path); the
    caller reopens and checks (one transaction may have been in flight)."""
    wanted = r.randrange(0, 12)  # 0: killed at once, perhaps while it opens the pool
    child = subprocess.Popen(
        [sys.executable, __file__, vfs_lib, pm_lib, scratch, "writer",
         json.dumps({"db": db, "seed": seed, "first": n, **s})],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = 0
    for line in (child.stdout if wanted else ()):
        word, number = line.split()
        number = int(number)
        if number != n:
            raise Failure(f"{what}: the writer reported transaction {number}, expected {n}")
        counts.record(word, n, ref)
        n += 1
        seen += 1
        if seen >= wanted:
            break
    child.kill()
    child.wait()
    # What it printed before the kill landed was acknowledged too.
    for line in child.stdout:
        if not line.endswith("\n"):
            raise Failure(f"{what}: the writer's last line is cut: {line!r}")
        word, number = line.split()
        counts.record(word, int(number), ref)
        n = int(number) + 1
    errors = child.stderr.read()
    if "Failure" in errors or "Traceback" in errors:
        raise Failure(f"{what}: the writer failed: {errors[-500:]}")
    counts.kills += 1
    move = r.random()
    if move < 0.3:
        new = f"{db}.r{n}"
        os.rename(db, new)
        counts.renames += 1
        db = new
    elif move < 0.4:
        new = f"{db}.l{n}"
        os.link(db, new)
        os.unlink(db)
        counts.links += 1
        db = new
    return n, db


def check_after_crash(c, ref, n, what):
    """After a kill: the state of the acknowledged transactions, or of those and the one in
    flight (transaction n, whose commit may have landed before the kill). Returns whether it
    had (the reference then has it too)."""
    ok = c.execute("pragma integrity_check").fetchone()[0]
    if ok != "ok":
        raise Failure(f"{what}: after the kill: integrity_check: {ok}")
    found = digest(c)
    if found == ref.digest():
        return False
    with_flight = ref.copy()
    kind, _ = transaction(ref.seed, n, *ref.args)
    if kind != "rollback":
        try:
            with_flight.apply(n)
        except Failure:
            pass
    if found == with_flight.digest():
        ref.c, ref.applied = with_flight.c, with_flight.applied
        return True
    raise Failure(f"{what}: after the kill the database is neither the state of the "
                  f"acknowledged transactions (last {ref.applied[-4:]}) nor that with "
                  f"transaction {n} in flight")


def writer(s):
    """A kill step's child: runs transactions from s["first"] until killed, printing each
    one's result once it returned."""
    library_env(s, os.path.dirname(s["db"]))
    c = connect(s["db"], s)
    n = s["first"]
    while True:
        result = run(c, s["seed"], n, *tx_args(s))
        # One write per line, so a kill never leaves half of one.
        sys.stdout.write(f"{result if result != 'rolledback' else 'rb'} {n}\n")
        sys.stdout.flush()
        n += 1


def power_life(seed, steps, counts, replay):
    """Power cuts at seeded operations of a workload on a simulated pool (nv_sim_*): after
    each, the reopened database holds the acknowledged transactions, or those and the one in
    flight."""
    r, s, life = new_life(seed, "power", power=True)
    db = os.path.join(life, "p.db")
    tx_count = r.randrange(4, 16)

    def workload(cut_at):
        ref = Reference(seed, *tx_args(s))
        if pm.nv_sim_start(seed, cut_at, 1) != 0:
            raise Failure(f"nv_sim_start: {pm.nv_last_error().decode()}")
        c = connect(db, s)
        opened = pm.nv_sim_ops()
        in_flight = None
        for n in range(tx_count):
            result = run(c, seed, n, *tx_args(s))
            if pm.nv_sim_crashed():
                in_flight = n
                break
            if result == "ok":
                ref.apply(n)
        c.close()
        return ref, in_flight, opened

    for step in range(steps):
        counts.steps += 1
        for name in os.listdir(life):
            os.unlink(os.path.join(life, name))
        _, _, opened = workload(NEVER)
        total = pm.nv_sim_ops() - opened
        pm.nv_sim_stop()
        for name in os.listdir(life):
            os.unlink(os.path.join(life, name))
        at = opened + r.randrange(max(total, 1))
        what = f"{replay}, step {step} (power cut at operation {at})"
        ref, in_flight, _ = workload(at)
        if pm.nv_sim_crashed():
            counts.cuts += 1
            if pm.nv_sim_recover() < 0:
                raise Failure(f"{what}: nv_sim_recover: {pm.nv_last_error().decode()}")
            c = connect(db, s)
            check_after_crash(c, ref, in_flight if in_flight is not None else tx_count, what)
            counts.transactions += len(ref.applied)
            c.close()
        pm.nv_sim_stop()
    shutil.rmtree(life)


def campaign(first_seed, steps):
    counts = Counts()
    seed = first_seed
    while counts.steps < steps:
        life_steps = min(random.Random(seed).randrange(4, 24), steps - counts.steps)
        power = seed % 5 == 4
        replay = (f"seed {seed} (replay: NVARRAY_SQLITE_POOLS_FIRST_SEED={seed} "
                  f"NVARRAY_SQLITE_POOLS_STEPS={life_steps} cargo test --release -p nvarray-pm "
                  f"--test sqlite_vfs -- pools_campaign)")
        try:
            (power_life if power else file_life)(seed, life_steps, counts, replay)
        except (Failure, sqlite3.Error) as e:
            print(json.dumps({"failure": f"{replay}: {type(e).__name__}: {e}"}), flush=True)
            sys.exit(1)
        seed += 1
    print(json.dumps({"steps": counts.steps, "lives": seed - first_seed,
                      "transactions": counts.transactions, "refused_full": counts.refused,
                      "rolled_back": counts.rolled_back, "kills": counts.kills,
                      "power_cuts": counts.cuts, "renames": counts.renames,
                      "hard_links": counts.links, "copies": counts.copies}), flush=True)


if command == "write-paths":
    try:
        write_paths()
    except (Failure, sqlite3.Error) as e:
        print(json.dumps({"failure": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(1)
elif command == "campaign":
    campaign(int(sys.argv[5]), int(sys.argv[6]))
elif command == "writer":
    writer(json.loads(sys.argv[5]))
elif command == "digest":
    s = json.loads(sys.argv[5])
    c = connect(s["db"], s)
    print(c.execute("pragma integrity_check").fetchone()[0], digest(c))
else:
    sys.exit(f"unknown command {command}")
