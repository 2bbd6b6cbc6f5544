"""Power cuts under SQLite on the VFS `nvarray`, driven by tests/sqlite_vfs.rs.

usage: sqlite_power_cuts.py VFS_LIB PM_LIB DIR FIRST_SEED SEEDS TEAR

Each seeded workload opens a database in a simulated pool (nvarray-pm's `nv_sim_*` calls:
src/ffi_sim.rs), journal off, so the library's transactions are SQLite's only atomicity, and
commits numbered transactions: schema first (number 0), then for each n a row n with a
payload, the payload of row n - 7 rewritten, row n - KEEP deleted and a counter on another
page set to n. A dry run counts the library's operations; then power is cut at 8 seeded
points of the workload (closing included). After each cut the database is reopened over what
the cut left and must pass `integrity_check` and hold exactly the state after the last
acknowledged transaction, or after the one whose commit was in flight: every row, payload and
counter. The reopened database then takes one more transaction.

Prints one JSON line: {"cuts": N, "transactions": N} (acknowledged before the cuts) or, on the first
failure, {"failure": "..."} and exits 1.
"""

import ctypes
import json
import os
import random
import sqlite3
import sys

KEEP = 24
CUTS_PER_SEED = 8
NEVER = 2**64 - 1

vfs_lib, pm_lib, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
first_seed, seeds, tear = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])

assert ctypes.CDLL(vfs_lib).nvarray_sqlite_register() == 0
pm = ctypes.CDLL(pm_lib)
pm.nv_sim_start.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
pm.nv_sim_ops.restype = ctypes.c_uint64
pm.nv_sim_recoveries.restype = ctypes.c_uint64
pm.nv_last_error.restype = ctypes.c_char_p

POOL = os.path.join(scratch, "power.db")
DB = f"file:{POOL}?vfs=nvarray&pool_size={1 << 20}"


def fail(why):
    print(json.dumps({"failure": why}), flush=True)
    sys.exit(1)


def sim(call, *args):
    rc = call(*args)
    if rc < 0:
        fail(f"{call.__name__}: {pm.nv_last_error().decode()}")
    return rc


def payload(seed, i, version):
    r = random.Random(seed * 1_000_003 + i * 1_009 + version)
    return r.randbytes(r.randrange(100, 3000))


def connect():
    c = sqlite3.connect(DB, uri=True, isolation_level=None)
    c.execute("pragma journal_mode=off")
    return c


def transaction(c, seed, n):
    c.execute("begin")
    if n == 0:
        c.execute("create table t(i integer primary key, pad blob)")
        c.execute("create table meta(k integer primary key, last integer)")
        c.execute("insert into meta values (0, 0)")
    else:
        c.execute("insert into t values (?, ?)", (n, payload(seed, n, 0)))
        if n > 7:
            c.execute("update t set pad = ? where i = ?", (payload(seed, n - 7, n), n - 7))
        c.execute("delete from t where i = ?", (n - KEEP,))
        c.execute("update meta set last = ? where k = 0", (n,))
    c.execute("commit")


def workload(seed):
    """Runs seed's workload until it ends or power is cut, and closes the database. Returns
    (acknowledged, in_flight, operations after the open, whether the cut came in the close):
    the last transaction whose commit returned before the cut (-1: none), and the one whose
    commit the cut interrupted (None: none)."""
    rng = random.Random(seed)
    c = connect()
    opened = pm.nv_sim_ops()
    acknowledged, in_flight = -1, None
    for n in range(rng.randrange(8, 40)):
        transaction(c, seed, n)
        if pm.nv_sim_crashed():
            in_flight = n
            break
        acknowledged = n
    open_at_cut = pm.nv_sim_crashed() == 1
    c.close()
    return acknowledged, in_flight, opened, not open_at_cut


def state(c, seed):
    """The database's state as the number of its last transaction (-1: no schema), after
    checking that the rows and payloads are exactly those that transaction left."""
    names = {r[0] for r in c.execute("select name from sqlite_master where type = 'table'")}
    if not names:
        return -1
    if names != {"t", "meta"}:
        raise AssertionError(f"tables {sorted(names)}")
    last = c.execute("select last from meta where k = 0").fetchone()[0]
    rows = c.execute("select i, pad from t order by i").fetchall()
    want = list(range(max(1, last - KEEP + 1), last + 1))
    if [i for i, _ in rows] != want:
        raise AssertionError(f"counter {last}, rows {[i for i, _ in rows]}")
    for i, pad in rows:
        version = i + 7 if i + 7 <= last else 0
        if pad != payload(seed, i, version):
            raise AssertionError(f"counter {last}: row {i} holds another payload than version {version}")
    return last


def check_recovered(seed, recoveries, acknowledged, in_flight, in_close, replay):
    """Reopens the database over what the cut left and checks it (module comment). A cut in
    the close may come after the pool was marked clean: then no recovery runs."""
    c = connect()
    if pm.nv_sim_recoveries() != recoveries + 1 and not in_close:
        fail(f"{replay}: the reopened pool ran no recovery")
    check = c.execute("pragma integrity_check").fetchone()[0]
    if check != "ok":
        fail(f"{replay}: integrity_check: {check}")
    found = state(c, seed)
    if found != acknowledged and found != in_flight:
        fail(f"{replay}: the database holds transaction {found}; acknowledged {acknowledged}, "
             f"in flight {in_flight}")
    # The recovered database keeps working.
    transaction(c, seed, found + 1)
    if state(c, seed) != found + 1:
        fail(f"{replay}: the transaction after recovery is not there")
    c.close()


cuts = transactions = 0
for seed in range(first_seed, first_seed + seeds):
    if os.path.exists(POOL):
        os.unlink(POOL)
    sim(pm.nv_sim_start, seed, NEVER, tear)
    _, _, opened, _ = workload(seed)
    total = pm.nv_sim_ops() - opened
    rng = random.Random(seed ^ 0xC0FFEE)
    for _ in range(CUTS_PER_SEED):
        at = opened + rng.randrange(max(total, 1))
        replay = (f"seed {seed}, cut at operation {at} (NVARRAY_SQLITE_POWER_FIRST_SEED={seed} "
                  f"NVARRAY_SQLITE_POWER_SEEDS=1 NVARRAY_PM_TORN_LINES={tear})")
        os.unlink(POOL)
        sim(pm.nv_sim_start, seed, at, tear)
        acknowledged, in_flight, _, in_close = workload(seed)
        if not pm.nv_sim_crashed():
            continue
        recoveries = pm.nv_sim_recoveries()
        if sim(pm.nv_sim_recover) != 1:
            fail(f"{replay}: nv_sim_recover found no pool that lost power")
        try:
            check_recovered(seed, recoveries, acknowledged, in_flight, in_close, replay)
        except (sqlite3.Error, AssertionError) as e:
            fail(f"{replay}: {type(e).__name__}: {e}")
        cuts += 1
        transactions += acknowledged + 1
    sim(pm.nv_sim_stop)

print(json.dumps({"cuts": cuts, "transactions": transactions}), flush=True)
