#!/usr/bin/env python3
"""Moneta's application study on nvarray's emulated devices (`nvarray repro apps`).

The Moneta talk's finding at the application level: on the fast array, databases and paging
recover far less than the raw I/O speed-up ("a factor of over 10x left on the table"), and
the file system hurts small writes. This script runs unmodified software on emulated devices
of several technologies, through nvarray's real front ends, and writes what each device gave
each program, normalised to the slowest device, as the talk's figure does.

Per device (`--devices`, slowest first):

- raw I/O through NBD: `nvarray serve` on a Unix socket, fio's own `nbd` engine, 4 KiB random
  and 512 KiB sequential reads and writes (XDD-like bandwidth);
- a file system: `nvarray mount` (FUSE file), a loop device over it, XFS; on it
  - the same four fio patterns on one large file (O_DIRECT), to show the file system's cost;
  - Berkeley DB (python3-bsddb3), a B-tree and a hash table: each transaction atomically swaps
    two values of a large table, committed durably (the seed's micro-benchmarks);
  - SQLite, the same swaps;
  - PostgreSQL 15: a throwaway cluster (initdb), pgbench TPC-B-like and select-only;
  - paging: a program that touches pages of a file mapped larger than the memory its cgroup
    may use, so its working set pages to and from the device.

Every program reports its own metric; the device report of the front end (SIGUSR1 between
programs) gives each program's requests at the device and how their mean latency splits into
the modelled device and `host`, the software above it. A missing package, no FUSE or no loop
device skips what needs it, with a message saying what is missing.

Run as root. Writes OUT/apps.md (tables, the figure, the commands), OUT/apps.json and
OUT/apps.svg.
"""

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PG_BIN = "/usr/lib/postgresql/15/bin"

# What each program's figure is, and its unit.
APPS = [
    ("bdb-btree", "Berkeley DB B-tree swaps", "txn/s"),
    ("bdb-hash", "Berkeley DB hash swaps", "txn/s"),
    ("sqlite", "SQLite swaps", "txn/s"),
    ("pg-tpcb", "PostgreSQL pgbench TPC-B", "txn/s"),
    ("pg-select", "PostgreSQL pgbench select-only", "txn/s"),
    ("paging", "paging (mmap beyond a cgroup's memory)", "touches/s"),
]
PATTERNS = [
    ("4k-randread", "randread", "4k"),
    ("4k-randwrite", "randwrite", "4k"),
    ("512k-read", "read", "512k"),
    ("512k-write", "write", "512k"),
]


@contextlib.contextmanager
def uninterrupted():
    """Holds Ctrl-C and SIGTERM back while undoing something (a mount, a loop device, a
    cluster): the signal is delivered after, so an interrupted run leaves nothing behind."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Skip(Exception):
    """A step that cannot run here; the message says what is missing."""


def log(msg):
    print(f"apps: {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=600, **kw):
    """Runs a command, raising with its stderr when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: exit {p.returncode}: {p.stderr.strip()[-600:]}")
    return p.stdout


def have(program):
    return shutil.which(program) is not None


def wait_for(predicate, what, timeout=60.0):
    """Polls `predicate` until it holds; a script waiting for another process, not a test."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


class Front:
    """A running nvarray front end (`serve` or `mount`) whose --json report arrives on its
    stdout when it stops."""

    def __init__(self, cmd, out_path):
        self.cmd = cmd
        self.out = open(out_path, "w+")
        self.err = open(out_path + ".err", "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """Stops it (SIGTERM) and returns its report, the whole session's (`None` if it
        printed none)."""
        with uninterrupted():
            self._stop()
        return self._report()

    def _stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _report(self):
        self.out.flush()
        with open(self.out.name) as f:
            text = f.read()
        reports, decoder, i = [], json.JSONDecoder(), 0
        while (i := text.find("{", i)) >= 0:
            try:
                obj, i = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                break
            reports.append(obj)
        return reports[-1] if reports else None

    def stderr(self):
        self.err.flush()
        with open(self.err.name) as f:
            return f.read()[-800:]


def device_share(report):
    """What the device report of one session says of its requests: how many, the data moved,
    their mean latency at the device and the share of it that is host (the software above the
    modelled device), and whether the emulator kept to the model's timing."""
    mean = report["latency_ns"]["mean"]
    host = report["breakdown_ns"].get("host", 0.0)
    return {
        "requests": report["requests"],
        "mb": (report["read_bytes"] + report["write_bytes"]) / 1e6,
        "mean_us": mean / 1e3,
        "host_share": host / mean if mean > 0 else 0.0,
        "faithful": report.get("faithful", True),
        # faithful, machine-limited (late only where the machine paused the emulator) or
        # not-faithful; reports from before the three-word verdict carry only `faithful`.
        "verdict": report.get("verdict", "faithful" if report.get("faithful", True) else "not-faithful"),
        "unfaithful_reason": report.get("unfaithful_reason"),
    }


# The report's verdict as the results table shows it.
VERDICT_CELL = {"faithful": "yes", "machine-limited": "machine-limited", "not-faithful": "NO"}


def fio_bandwidth(args, extra):
    """One fio run's bandwidth in MB/s (reads and writes together)."""
    out = run(["fio", "--output-format=json", "--name=apps", *extra], timeout=args.seconds * 10 + 300)
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return (job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e6


def pattern_args(args, rw, bs):
    return [f"--rw={rw}", f"--bs={bs}", "--iodepth=16", "--time_based", f"--runtime={args.seconds}"]


# ---------------------------------------------------------------------------------------------
# Raw I/O through NBD


def raw_io(args, preset, work, result):
    """The four patterns through NBD, each against a fresh `nvarray serve` (its own report)."""
    if not have("fio"):
        raise Skip("fio is not installed (apt-get install fio)")
    if "nbd" not in run(["fio", "--enghelp"]):
        raise Skip("this fio has no nbd engine (Debian's fio has it)")
    sock = os.path.join(work, "nbd.sock")
    for name, rw, bs in PATTERNS:
        front = Front(
            [args.nvarray, "serve", "--preset", preset, "--size", args.size, "--listen", f"unix:{sock}", "--json"],
            os.path.join(work, f"serve-{name}.json"),
        )
        try:
            wait_for(lambda: os.path.exists(sock) or not front.alive(), "the NBD socket")
            if not front.alive():
                raise RuntimeError(f"nvarray serve: {front.stderr()}")
            mbps = fio_bandwidth(args, ["--ioengine=nbd", f"--uri=nbd+unix:///?socket={sock}", *pattern_args(args, rw, bs)])
        finally:
            report = front.stop()
        if report is None:
            raise RuntimeError(f"nvarray serve gave no report: {front.stderr()}")
        result["raw"][name] = {"mb_per_s": mbps, "device": device_share(report)}
        log(f"{preset}: raw {name} {mbps:.1f} MB/s")


# ---------------------------------------------------------------------------------------------
# The file system and the programs on it


def check_file_system_tools():
    for program, package in [("losetup", "mount"), ("mkfs.xfs", "xfsprogs"), ("mount", "mount")]:
        if not have(program):
            raise Skip(f"{program} is missing (apt-get install {package})")
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: FUSE is not available")
    if not os.path.exists("/dev/loop-control"):
        raise Skip("no /dev/loop-control: loop devices are not available")


class Session:
    """One `nvarray mount` of the device's bytes (a file in /dev/shm, so they outlive the
    session), a loop device over its file and XFS mounted: one program runs in it, and the
    session's device report is that program's. Closed in reverse order."""

    def __init__(self, args, preset, work, backing, mkfs=False):
        self.fuse_dir = os.path.join(work, "fuse")
        self.fs_dir = os.path.join(work, "fs")
        os.makedirs(self.fuse_dir, exist_ok=True)
        os.makedirs(self.fs_dir, exist_ok=True)
        self.loop, self.mounted = None, False
        self.front = Front(
            [args.nvarray, "mount", self.fuse_dir, "--preset", preset, "--size", args.size, "--backing", f"file:{backing}", "--json"],
            os.path.join(work, "mount.json"),
        )
        try:
            disk = os.path.join(self.fuse_dir, "disk")
            wait_for(lambda: os.path.exists(disk) or not self.front.alive(), "the FUSE file")
            if not self.front.alive():
                raise RuntimeError(f"nvarray mount: {self.front.stderr()}")
            self.loop = run(["losetup", "--find", "--show", "--direct-io=on", disk]).strip()
            if mkfs:
                # -K: no discard of the whole device first.
                run(["mkfs.xfs", "-f", "-K", "-q", self.loop])
            run(["mount", self.loop, self.fs_dir])
            self.mounted = True
        except BaseException:
            self.close()
            raise

    def path(self, name):
        return os.path.join(self.fs_dir, name)

    def close(self):
        """Unmounts (the page cache goes with it: the next program starts cold) and returns
        the session's device report."""
        with uninterrupted():
            if self.mounted:
                # A program killed mid-way may hold it a moment longer; then detach it anyway.
                unmounted = lambda: subprocess.run(["umount", self.fs_dir], capture_output=True).returncode == 0
                try:
                    wait_for(unmounted, "the file system to unmount", timeout=10)
                except RuntimeError:
                    subprocess.run(["umount", "-l", self.fs_dir], capture_output=True)
                self.mounted = False
            if self.loop:
                subprocess.run(["losetup", "-d", self.loop], capture_output=True)
                disk = os.path.join(self.fuse_dir, "disk")
                # The kernel may detach it a little later; `nvarray mount` stops only after.
                attached = lambda: subprocess.run(["losetup", "-j", disk], capture_output=True, text=True).stdout.strip()
                try:
                    wait_for(lambda: not attached(), "the loop device to detach", timeout=30)
                except RuntimeError:
                    pass  # then `nvarray mount` says what still holds it, and is killed
                self.loop = None
            return self.front.stop()


def measured(args, preset, work, backing, result, section, name, program, unit=""):
    """Runs `program(session)` in a session of its own and records its figure with the
    device's report of the session; a skip is recorded with its reason."""
    session = Session(args, preset, work, backing)
    try:
        value = program(session)
    except Skip as e:
        session.close()
        result[section][name] = {"skipped": str(e)}
        log(f"{preset}: {name} skipped: {e}")
        return
    except BaseException:
        session.close()
        raise
    report = session.close()
    if report is None:
        raise RuntimeError(f"nvarray mount gave no report: {session.front.stderr()}")
    key = "mb_per_s" if section == "fs" else "value"
    result[section][name] = {key: value, "device": device_share(report)}
    log(f"{preset}: {name} {value:,.1f} {unit}")


BDB_PROGRAM = r"""
import random, sys, time
from bsddb3 import db
home, kind, records, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
env = db.DBEnv()
env.set_cachesize(0, 8 << 20)
env.open(home, db.DB_CREATE | db.DB_INIT_TXN | db.DB_INIT_LOG | db.DB_INIT_LOCK | db.DB_INIT_MPOOL | db.DB_RECOVER)
table = db.DB(env)
table.open("swap.db", None, db.DB_BTREE if kind == "btree" else db.DB_HASH, db.DB_CREATE | db.DB_AUTO_COMMIT)
if seconds == 0:
    # Fill the table (a setup step, in a session of its own).
    txn = env.txn_begin()
    for i in range(records):
        table.put(b"%08d" % i, (b"%08d" % i) * 16, txn=txn)
        if i % 10000 == 9999:
            txn.commit(); txn = env.txn_begin()
    txn.commit()
    env.txn_checkpoint()
    table.close(); env.close()
    sys.exit(0)
rng = random.Random(7)
n, start = 0, time.monotonic()
while time.monotonic() - start < seconds:
    a, b = (b"%08d" % rng.randrange(records) for _ in range(2))
    txn = env.txn_begin()
    va, vb = table.get(a, txn=txn, flags=db.DB_RMW), table.get(b, txn=txn, flags=db.DB_RMW)
    table.put(a, vb, txn=txn); table.put(b, va, txn=txn)
    txn.commit()  # durable: the log is flushed at each commit
    n += 1
print(n / (time.monotonic() - start))
table.close(); env.close()
"""


def have_bsddb3():
    return subprocess.run([sys.executable, "-c", "import bsddb3"], capture_output=True).returncode == 0


def bdb(args, session, kind, seconds):
    if not have_bsddb3():
        raise Skip("python3-bsddb3 is not installed (apt-get install python3-bsddb3)")
    home = session.path(f"bdb-{kind}")
    os.makedirs(home, exist_ok=True)
    out = run([sys.executable, "-c", BDB_PROGRAM, home, kind, str(args.records), str(seconds)], timeout=args.seconds * 20 + 900)
    return float(out.strip().splitlines()[-1]) if seconds else None


def sqlite_fill(args, session):
    import sqlite3

    con = sqlite3.connect(session.path("swap.sqlite"), isolation_level=None)
    con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    con.execute("BEGIN")
    con.executemany("INSERT INTO t VALUES (?, ?)", ((i, os.urandom(128)) for i in range(args.records)))
    con.execute("COMMIT")
    con.close()


def sqlite_swaps(args, session):
    import sqlite3

    con = sqlite3.connect(session.path("swap.sqlite"), isolation_level=None)
    con.execute("PRAGMA synchronous=FULL")
    rng = random.Random(7)
    n, start = 0, time.monotonic()
    while time.monotonic() - start < args.seconds:
        a, b = rng.randrange(args.records), rng.randrange(args.records)
        con.execute("BEGIN IMMEDIATE")
        va = con.execute("SELECT v FROM t WHERE k=?", (a,)).fetchone()[0]
        vb = con.execute("SELECT v FROM t WHERE k=?", (b,)).fetchone()[0]
        con.execute("UPDATE t SET v=? WHERE k=?", (vb, a))
        con.execute("UPDATE t SET v=? WHERE k=?", (va, b))
        con.execute("COMMIT")
        n += 1
    rate = n / (time.monotonic() - start)
    con.close()
    return rate


def check_postgres():
    for program in ["initdb", "pg_ctl", "pgbench"]:
        if not os.path.exists(os.path.join(PG_BIN, program)):
            raise Skip(f"PostgreSQL 15 is not installed ({PG_BIN}/{program}; apt-get install postgresql)")
    if not have("runuser"):
        raise Skip("runuser is missing (util-linux)")


class Postgres:
    """A throwaway PostgreSQL cluster on the session's file system, run as the postgres user;
    `init` makes the cluster and pgbench's tables."""

    def __init__(self, args, session, init=False):
        check_postgres()
        self.data = session.path("pg")
        self.sock = tempfile.mkdtemp(prefix="nvarray-apps-pg-")
        shutil.chown(self.sock, "postgres", "postgres")
        self.started = False
        if init:
            os.makedirs(self.data, exist_ok=True)
            shutil.chown(self.data, "postgres", "postgres")
            self.as_pg([f"{PG_BIN}/initdb", "-D", self.data, "-A", "trust", "--no-sync"])
        options = f"-k {self.sock} -c listen_addresses='' -c shared_buffers=16MB -c max_wal_size=256MB"
        try:
            self.started = True
            self.as_pg([f"{PG_BIN}/pg_ctl", "-D", self.data, "-o", options, "-w", "-l", os.path.join(self.sock, "log"), "start"])
            if init:
                self.pgbench(["-i", "-s", str(args.pg_scale), "-q"])
        except BaseException:
            self.close()
            raise

    def as_pg(self, cmd, timeout=900):
        return run(["runuser", "-u", "postgres", "--", *cmd], timeout=timeout, cwd="/")

    def pgbench(self, extra, timeout=900):
        return self.as_pg([os.path.join(PG_BIN, "pgbench"), "-h", self.sock, *extra, "postgres"], timeout=timeout)

    def tps(self, args, extra):
        out = self.pgbench(["-T", str(max(1, round(args.seconds))), "-c", "4", "-j", "2", *extra])
        for line in out.splitlines():
            if line.startswith("tps ="):
                return float(line.split()[2])
        raise RuntimeError(f"pgbench printed no tps: {out[-400:]}")

    def close(self):
        with uninterrupted():
            if self.started:
                subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"],
                           capture_output=True, cwd="/")
                self.started = False
            shutil.rmtree(self.sock, ignore_errors=True)


def pgbench_run(args, session, extra):
    pg = Postgres(args, session)
    try:
        return pg.tps(args, extra)
    finally:
        pg.close()


PAGING_PROGRAM = r"""
import mmap, os, random, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_RDWR)
size = os.fstat(fd).st_size
mm = mmap.mmap(fd, size)
mm.madvise(mmap.MADV_RANDOM)  # page by page, as paging does; no file readahead
pages = size // 4096
rng = random.Random(7)
n, start = 0, time.monotonic()
while time.monotonic() - start < seconds:
    for _ in range(64):
        page = rng.randrange(pages) * 4096
        if rng.random() < 0.3:
            mm[page] = (mm[page] + 1) & 0xFF  # a write: the page is dirty, written back when evicted
        else:
            mm[page]
    n += 64
print(n / (time.monotonic() - start))
"""


def memory_cgroup():
    """Where to make a memory cgroup, and whether it is cgroup v2."""
    if os.path.isdir("/sys/fs/cgroup/memory"):
        return "/sys/fs/cgroup/memory", False
    controllers = "/sys/fs/cgroup/cgroup.controllers"
    if os.path.exists(controllers) and "memory" in open(controllers).read().split():
        return "/sys/fs/cgroup", True
    raise Skip("no memory cgroup (v1 /sys/fs/cgroup/memory, or v2 with the memory controller)")


def paging(args, session):
    root, v2 = memory_cgroup()
    group = os.path.join(root, f"nvarray-apps-{os.getpid()}")
    os.mkdir(group)
    try:
        with open(os.path.join(group, "memory.max" if v2 else "memory.limit_in_bytes"), "w") as f:
            f.write(str(parse_size(args.paging_memory)))
        procs = os.path.join(group, "cgroup.procs")

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        p = subprocess.run([sys.executable, "-c", PAGING_PROGRAM, session.path("paged"), str(args.seconds)],
                           capture_output=True, text=True, preexec_fn=enter, timeout=args.seconds * 20 + 300)
        if p.returncode != 0:
            raise RuntimeError(f"paging program: {p.stderr[-400:]}")
        return float(p.stdout.strip().splitlines()[-1])
    finally:
        # Empty once its process has exited; its page cache moves to the parent.
        with uninterrupted():
            os.rmdir(group)


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.lower()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def setup(args, session, result, preset):
    """One session that makes what the programs need: XFS, fio's file, the paged file, the
    tables and the PostgreSQL cluster. Each missing tool is recorded; the rest goes on."""
    run(["fio", "--name=layout", f"--filename={session.path('big')}", f"--size={args.file_size}", "--rw=write", "--bs=1m", "--direct=1"])
    # Written whole (not sparse), so that every page read back comes from the device.
    run(["fio", "--name=paged", f"--filename={session.path('paged')}", f"--size={args.paging_file}", "--rw=write", "--bs=1m", "--direct=1"])
    missing = {}
    for kind in ["btree", "hash"]:
        try:
            bdb(args, session, kind, 0)
        except Skip as e:
            missing[f"bdb-{kind}"] = str(e)
    sqlite_fill(args, session)
    try:
        Postgres(args, session, init=True).close()
    except Skip as e:
        missing["pg-tpcb"] = missing["pg-select"] = str(e)
    try:
        memory_cgroup()
    except Skip as e:
        missing["paging"] = str(e)
    log(f"{preset}: set up (XFS, files, tables, PostgreSQL cluster)")
    return missing


def programs(args, preset, work, result):
    check_file_system_tools()
    if not have("fio"):
        raise Skip("fio is not installed (apt-get install fio)")
    backing = f"/dev/shm/nvarray-apps-{os.getpid()}-{preset}.img"
    try:
        first = Session(args, preset, work, backing, mkfs=True)
        try:
            missing = setup(args, first, result, preset)
        finally:
            first.close()
        for name, rw, bs in PATTERNS:
            path_args = lambda s: [f"--filename={s.path('big')}", f"--size={args.file_size}", "--direct=1", "--ioengine=libaio"]
            measured(args, preset, work, backing, result, "fs", name,
                     lambda s, rw=rw, bs=bs: fio_bandwidth(args, [*path_args(s), *pattern_args(args, rw, bs)]), "MB/s")
        steps = [
            ("bdb-btree", lambda s: bdb(args, s, "btree", args.seconds)),
            ("bdb-hash", lambda s: bdb(args, s, "hash", args.seconds)),
            ("sqlite", lambda s: sqlite_swaps(args, s)),
            ("pg-tpcb", lambda s: pgbench_run(args, s, [])),
            ("pg-select", lambda s: pgbench_run(args, s, ["-S"])),
            ("paging", lambda s: paging(args, s)),
        ]
        units = {a: u for a, _, u in APPS}
        for app, step in steps:
            if app in missing:
                result["apps"][app] = {"skipped": missing[app]}
                log(f"{preset}: {app} skipped: {missing[app]}")
                continue
            measured(args, preset, work, backing, result, "apps", app, step, units[app])
    finally:
        with uninterrupted():
            if os.path.exists(backing):
                os.remove(backing)


# ---------------------------------------------------------------------------------------------
# The report


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def speedups(results):
    """Per device: raw I/O speed-up (geometric mean of the four raw patterns) and each
    program's, against the first (slowest) device."""
    base = results[0]
    raw = lambda r: geomean([r["raw"].get(p, {}).get("mb_per_s") for p, _, _ in PATTERNS])
    out = []
    for r in results:
        row = {"device": r["device"], "raw": None}
        if raw(r) and raw(base):
            row["raw"] = raw(r) / raw(base)
        for app, _, _ in APPS:
            mine, theirs = r["apps"].get(app, {}).get("value"), base["apps"].get(app, {}).get("value")
            row[app] = mine / theirs if mine and theirs else None
        out.append(row)
    return out


def svg_figure(rows, path):
    """Grouped bars on a log scale: per device, raw I/O then each program, speed-up over the
    slowest device (the talk's figure)."""
    series = [("raw", "raw I/O", "#1f5fbf")] + [(a, t, c) for (a, t, _), c in zip(APPS, ["#d95f02", "#e6ab02", "#66a61e", "#7570b3", "#a6761d", "#e7298a"])]
    values = [row[key] for row in rows for key, _, _ in series if row.get(key)]
    top = max(values + [10.0])
    decades = max(1, math.ceil(math.log10(top)))
    bottom = min(values + [1.0])
    # One decade below the least bar, so that a 1x bar (the slowest device's) shows.
    low = math.floor(math.log10(bottom)) - 1
    w, h, left, right, upper, lower = 940, 420, 60, 240, 30, 60
    plot_w, plot_h = w - left - right, h - upper - lower
    group_w = plot_w / max(1, len(rows))
    bar_w = group_w * 0.8 / len(series)
    y = lambda v: upper + plot_h * (1 - (math.log10(v) - low) / (decades - low))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<text x="{left}" y="18" font-size="14">Speed-up over {rows[0]["device"]} (log scale): raw I/O against the programs on it</text>']
    for d in range(low, decades + 1):
        yy = y(10 ** d)
        parts.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + plot_w}" y2="{yy:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{10 ** d:g}x</text>')
    for g, row in enumerate(rows):
        x0 = left + g * group_w + group_w * 0.1
        for s, (key, _, color) in enumerate(series):
            v = row.get(key)
            if not v:
                continue
            yy = y(max(v, 10 ** low))
            parts.append(f'<rect x="{x0 + s * bar_w:.1f}" y="{yy:.1f}" width="{bar_w * 0.9:.1f}" height="{upper + plot_h - yy:.1f}" fill="{color}"><title>{row["device"]} {key}: {v:.2f}x</title></rect>')
        parts.append(f'<text x="{left + g * group_w + group_w / 2:.1f}" y="{upper + plot_h + 18}" text-anchor="middle">{row["device"]}</text>')
    for s, (_, title, color) in enumerate(series):
        parts.append(f'<rect x="{w - right + 10}" y="{upper + s * 20}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{w - right + 28}" y="{upper + s * 20 + 10}">{title[:36]}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def fmt(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def markdown(args, results, rows, command):
    lines = [
        "# Moneta's application study on nvarray",
        "",
        f"Made by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores; "
        f"each device emulated at {args.size}, each measurement {args.seconds:g} s.",
        "",
        "![speed-up over the slowest device](apps.svg)",
        "",
        "## Speed-up over the slowest device",
        "",
        "Raw I/O is the geometric mean of the four raw NBD bandwidths. A program that recovers the "
        "raw speed-up has a ratio (program / raw) near 1; the talk found far less on the fast array.",
        "",
        "| device | raw I/O | " + " | ".join(a for a, _, _ in APPS) + " |",
        "|---|---|" + "---|" * len(APPS),
    ]
    for row in rows:
        cells = [fmt(row["raw"], 2) + "x"] + [
            "-" if row[a] is None else f"{row[a]:.2f}x ({row[a] / row['raw']:.2f})" if row["raw"] else f"{row[a]:.2f}x" for a, _, _ in APPS
        ]
        lines.append(f"| {row['device']} | " + " | ".join(cells) + " |")
    lines += ["", "In brackets: the program's speed-up over the raw I/O speed-up.", ""]
    lines += ["## Raw I/O (NBD) and the same patterns through XFS (MB/s)", "",
              "| device | " + " | ".join(f"{p} raw | {p} XFS" for p, _, _ in PATTERNS) + " |",
              "|---|" + "---|---|" * len(PATTERNS)]
    for r in results:
        cells = []
        for p, _, _ in PATTERNS:
            cells.append(fmt(r["raw"].get(p, {}).get("mb_per_s")))
            cells.append(fmt(r["fs"].get(p, {}).get("mb_per_s")))
        lines.append(f"| {r['device']} | " + " | ".join(cells) + " |")
    lines += ["", "## Each measurement, and what the device saw", "",
              "Each measurement ran in a front-end session of its own (a fresh `nvarray serve` for NBD; "
              "for XFS a new `nvarray mount` of the same bytes, so the page cache starts cold), and the "
              "session's device report gives its requests at the emulated device, the data moved, their "
              "mean latency there, and the share of that mean that is `host`: the front end, the kernel "
              "and the emulation above the modelled device (0 where a request's commands overlapped, so "
              "that the model's time alone exceeds the request's; see the README). `verdict`: whether "
              "the emulator kept to the model's timing in that session (yes), kept it except where the "
              "machine paused it (machine-limited), or fell behind (NO).", "",
              "| device | measurement | figure | device requests | MB | mean µs | host share | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    rows_of = lambda r: ([(f"NBD fio {p}", r["raw"].get(p, {}), "MB/s", "mb_per_s") for p, _, _ in PATTERNS]
                         + [(f"XFS fio {p}", r["fs"].get(p, {}), "MB/s", "mb_per_s") for p, _, _ in PATTERNS]
                         + [(app, r["apps"].get(app, {}), unit, "value") for app, _, unit in APPS])
    for r in results:
        for label, a, unit, key in rows_of(r):
            if "skipped" in a:
                lines.append(f"| {r['device']} | {label} | skipped: {a['skipped']} | | | | | |")
                continue
            if key not in a:
                continue
            d = a["device"]
            lines.append(f"| {r['device']} | {label} | {a[key]:,.1f} {unit} | {d['requests']:,} | {d['mb']:,.1f} | "
                         f"{d['mean_us']:,.1f} | {d['host_share'] * 100:.0f} % | {VERDICT_CELL[d['verdict']]} |")
    skipped = [(r["device"], what, why) for r in results for what, why in r["skipped"]]
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- {d}: {w}: {why}" for d, w, why in skipped]
    sessions = [a["device"] for r in results for _, a, _, _ in rows_of(r) if "device" in a]
    late = [d for d in sessions if d["verdict"] == "not-faithful"]
    if late:
        lines += ["", f"The emulator was NOT FAITHFUL in {len(late)} of {len(sessions)} sessions (it fell behind "
                  f"its model; the reasons are in apps.json, e.g.: {late[0]['unfaithful_reason']}). "
                  "Their figures are what the software got from a device slower than the model by that lateness."]
    paused = [d for d in sessions if d["verdict"] == "machine-limited"]
    if paused:
        lines += ["", f"{len(paused)} of {len(sessions)} sessions were machine-limited: late only where this "
                  "machine paused the emulator's threads (the share is in apps.json's reasons, e.g.: "
                  f"{paused[0]['unfaithful_reason']}). Their figures hold those pauses."]
    lines += ["", "## Commands", "", "```sh", command,
              "# per device, what the script runs:",
              f"nvarray serve --preset DEVICE --size {args.size} --listen unix:SOCK --json",
              f"fio --ioengine=nbd --uri='nbd+unix:///?socket=SOCK' --rw=RW --bs=BS --iodepth=16 --time_based --runtime={args.seconds:g}",
              f"nvarray mount DIR --preset DEVICE --size {args.size} --json",
              "LOOP=$(losetup --find --show --direct-io=on DIR/disk); mkfs.xfs -f -K $LOOP; mount $LOOP FS",
              f"fio --filename=FS/big --size={args.file_size} --direct=1 --ioengine=libaio --rw=RW --bs=BS --iodepth=16 --time_based --runtime={args.seconds:g}",
              f"python3 (bsddb3): {args.records} records, each transaction swaps two values, committed durably",
              f"python3 (sqlite3): the same, PRAGMA synchronous=FULL",
              f"initdb; pgbench -i -s {args.pg_scale}; pgbench -T {max(1, int(args.seconds))} -c 4 -j 2 [-S]",
              f"python3: mmap a {args.paging_file} file, touch random pages (30 % writes) in a cgroup of {args.paging_memory}",
              "kill -USR1 <front end>   # its device report, between programs",
              "```", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvarray", required=True, help="the nvarray binary")
    parser.add_argument("--out", default="apps", help="directory for apps.md, apps.json, apps.svg")
    parser.add_argument("--devices", default=None,
                        help="presets, slowest first (default hdd,pcie-flash-2010,moneta,optane,dram; --quick: pcie-flash-2010,dram)")
    parser.add_argument("--seconds", type=float, default=5.0, help="each measurement's length")
    parser.add_argument("--size", default="2g", help="each emulated device's size")
    parser.add_argument("--file-size", default="512m", help="fio's file on XFS")
    parser.add_argument("--records", type=int, default=100_000, help="rows of the swap tables")
    parser.add_argument("--pg-scale", type=int, default=10, help="pgbench's scale factor")
    parser.add_argument("--paging-file", default="512m", help="the mapped file")
    parser.add_argument("--paging-memory", default="96m", help="the memory the paging program may use")
    parser.add_argument("--quick", action="store_true", help="a smoke run: two devices, short runs, small tables")
    parser.add_argument("--command", default=None, help="the command to print as the one that made the report")
    args = parser.parse_args()
    if args.quick:
        args.devices = args.devices or "pcie-flash-2010,dram"
        args.seconds, args.size = min(args.seconds, 1.0), "1g"
        args.file_size, args.records, args.pg_scale = "64m", 5_000, 1
        args.paging_file, args.paging_memory = "96m", "32m"
    # SIGTERM unwinds like Ctrl-C: every mount, loop device, cluster and cgroup is undone.
    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    args.devices = args.devices or "hdd,pcie-flash-2010,moneta,optane,dram"
    if os.geteuid() != 0:
        sys.exit("apps: run as root (loop devices, mounts, cgroups, PostgreSQL's own user)")
    for preset in args.devices.split(","):
        known = subprocess.run([args.nvarray, "presets", "show", preset], capture_output=True, text=True)
        if known.returncode != 0:
            sys.exit(f"apps: --devices: {known.stderr.strip()}")
    os.makedirs(args.out, exist_ok=True)
    command = args.command or " ".join(sys.argv)
    started = time.monotonic()
    results = []
    for preset in args.devices.split(","):
        work = tempfile.mkdtemp(prefix=f"nvarray-apps-{preset}-")
        os.chmod(work, 0o755)  # PostgreSQL runs as its own user, under it
        result = {"device": preset, "raw": {}, "fs": {}, "apps": {}, "skipped": []}
        try:
            for what, step in [("raw I/O", lambda: raw_io(args, preset, work, result)),
                               ("file system", lambda: programs(args, preset, work, result))]:
                try:
                    step()
                except Skip as e:
                    result["skipped"].append((what, str(e)))
                    log(f"{preset}: {what} skipped: {e}")
        except KeyboardInterrupt:
            log("interrupted; every mount, loop device, cluster and cgroup it made is undone")
            sys.exit(130)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for app, r in result["apps"].items():
            if "skipped" in r:
                result["skipped"].append((app, r["skipped"]))
        results.append(result)
        log(f"{preset}: done at {time.monotonic() - started:.0f} s")
    rows = speedups(results)
    with open(os.path.join(args.out, "apps.json"), "w") as f:
        json.dump({"settings": vars(args), "results": results, "speedups": rows, "seconds": time.monotonic() - started}, f, indent=2)
    svg_figure(rows, os.path.join(args.out, "apps.svg"))
    with open(os.path.join(args.out, "apps.md"), "w") as f:
        f.write(markdown(args, results, rows, command))
    log(f"wrote {args.out}/apps.md, apps.json, apps.svg in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
