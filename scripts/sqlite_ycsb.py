#!/usr/bin/env python3
"""The vNVML seed's study with a real database (issue 42): YCSB-style workloads on SQLite from
several processes at once against one database, through the VFS `nvarray` (the database in an
nvarray-pm pool) and against the seed's baseline, the same SQLite with journal_mode=OFF and
synchronous=OFF on a file in /dev/shm ("files directly to NVM, journaling and msync disabled").

  scripts/sqlite_ycsb.py                       # A, B, C; 64 KiB and 1 KiB records; both
  scripts/sqlite_ycsb.py --workloads a --record-bytes 65536 --records 256 --seconds 5
  scripts/sqlite_ycsb.py --log-size 128m,2g    # the seed's log-size comparison
  scripts/sqlite_ycsb.py --containers          # processes against containers (root)
  scripts/sqlite_ycsb.py --json out.json      # --json -: JSON on stdout, the table on stderr

Workloads (YCSB's core mixes): A 50 % reads / 50 % updates, B 95 / 5, C reads only; keys drawn
uniformly or zipfian (theta 0.99, YCSB's default, the hot keys scattered over the key space).
Each operation is its own transaction. A read selects one record; an update replaces its
field with fresh bytes. Every configuration loads its own database first (untimed), then runs
`--processes` processes for `--seconds`; the figure is their summed operations per second.
Runs alternate between the VFS and the baseline (each run starting with another), so drift
hits both alike; the medians of
`--runs` runs are reported, with the ratio VFS / baseline.

Needs target/native/nvarray-sqlite.so (scripts/build_native.sh; NVARRAY_SQLITE_VFS names
another). `nvarray repro vnvml` runs it for the figure vnvml-sqlite. The pools' NVM tier is
/dev/shm unless NVARRAY_PM_NVM_DIR says otherwise.
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VFS_LIB = os.environ.get("NVARRAY_SQLITE_VFS") or os.path.join(ROOT, "target", "native",
                                                               "nvarray-sqlite.so")
MIXES = {"a": 0.50, "b": 0.95, "c": 1.00}  # fraction of reads


def fail(msg):
    sys.exit(f"sqlite_ycsb: {msg}")


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def connect(target, timeout=60.0):
    """A connection to `target`: ("vfs", path, pool_bytes) or ("base", path, 0)."""
    kind, path, pool_bytes = target
    if kind == "vfs":
        if ctypes.CDLL(VFS_LIB).nvarray_sqlite_register() != 0:
            fail("cannot register the VFS")
        db = sqlite3.connect(f"file:{path}?vfs=nvarray&pool_size={pool_bytes}", uri=True,
                             timeout=timeout, isolation_level=None)
        db.execute("pragma journal_mode=off")
        db.execute("pragma synchronous=normal")
    else:
        db = sqlite3.connect(path, timeout=timeout, isolation_level=None)
        db.execute("pragma journal_mode=off")
        db.execute("pragma synchronous=off")
        if os.environ.get("SQLITE_YCSB_BASELINE_MMAP") == "1":
            # Reads through a mapping too, as the VFS's do (writes stay pwrite).
            db.execute("pragma mmap_size=17179869184")
    return db


def load(target, records, record_bytes):
    db = connect(target)
    db.execute("create table usertable(k integer primary key, field blob)")
    # In transactions of about 4 MiB: one of the whole data set would not fit the library's
    # log (NVARRAY_PM_LOG_SIZE, 64 MiB by default).
    batch = max(1, (4 << 20) // record_bytes)
    for first in range(0, records, batch):
        db.execute("begin")
        for k in range(first, min(records, first + batch)):
            db.execute("insert into usertable values (?, ?)", (k, os.urandom(record_bytes)))
        db.execute("commit")
    db.close()


class Zipf:
    """Zipfian ranks over n keys (theta < 1, Gray et al.'s method as YCSB uses it), scattered
    over the key space by a fixed permutation so the hot keys are not neighbours."""

    def __init__(self, n, theta, rng):
        self.n, self.theta, self.rng = n, theta, rng
        zetan = sum(1.0 / (i ** theta) for i in range(1, n + 1))
        zeta2 = 1.0 + 1.0 / (2 ** theta)
        self.alpha = 1.0 / (1.0 - theta)
        self.zetan = zetan
        self.eta = (1 - (2.0 / n) ** (1 - theta)) / (1 - zeta2 / zetan)
        self.perm = list(range(n))
        random.Random(0x5eed).shuffle(self.perm)

    def next(self):
        u = self.rng.random()
        uz = u * self.zetan
        if uz < 1.0:
            rank = 0
        elif uz < 1.0 + 0.5 ** self.theta:
            rank = 1
        else:
            rank = int(self.n * ((self.eta * u - self.eta + 1) ** self.alpha))
        return self.perm[min(rank, self.n - 1)]


CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000


def into_container(target):
    """Moves this process into a mount namespace of its own with the database's directory
    bind-mounted at a new path, as a container with a bind mount sees it (the seed used
    Docker bind mounts); returns the target at that path."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        fail(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())} (needs root)")
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        fail(f"making / private: {os.strerror(ctypes.get_errno())}")
    kind, path, pool_bytes = target
    inside = tempfile.mkdtemp(prefix="nvarray-ycsb-container-")
    if libc.mount(os.path.dirname(path).encode(), inside.encode(), None, MS_BIND, None) != 0:
        fail(f"bind mount: {os.strerror(ctypes.get_errno())}")
    return (kind, os.path.join(inside, os.path.basename(path)), pool_bytes), inside


def worker(target, records, record_bytes, read_fraction, dist, seconds, seed, start, out,
           container=False):
    inside = None
    if container:
        target, inside = into_container(target)
    rng = random.Random(seed)
    pick = Zipf(records, 0.99, rng).next if dist == "zipf" else (lambda: rng.randrange(records))
    db = connect(target)
    start.wait()
    ops, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(16):
            k = pick()
            if rng.random() < read_fraction:
                db.execute("select field from usertable where k = ?", (k,)).fetchone()
            else:
                db.execute("update usertable set field = ? where k = ?",
                           (os.urandom(record_bytes), k))
            ops += 1
    db.close()
    if inside:
        ctypes.CDLL(None).umount2(inside.encode(), 0)
        os.rmdir(inside)
    out.put(ops)


def run_once(target, args, workload, record_bytes, records, dist, container=False):
    # Spawned, not forked: a forked child would inherit nvarray-pm's threads' state.
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(args.processes)
    out = ctx.Queue()
    procs = [ctx.Process(target=worker,
                        args=(target, records, record_bytes, MIXES[workload], dist,
                              args.seconds, 1000 + i, start, out, container))
             for i in range(args.processes)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            fail(f"a worker exited with {p.exitcode}")
    return total / args.seconds


def configuration(args, scratch, workload, record_bytes, records, dist, log_size):
    """Medians of the VFS's and the baseline's operations per second, runs alternating."""
    runs = {"vfs": [], "base": [], "container": []}
    data = records * (record_bytes + 64)
    pool_bytes = max(64 << 20, data * 3)
    if log_size:
        os.environ["NVARRAY_PM_LOG_SIZE"] = str(log_size)
    kinds = ["vfs", "base"] + (["container"] if args.containers else [])
    for i in range(args.runs):
        # Each run starts with another kind, so none always runs first (or just after a load).
        for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
            d = tempfile.mkdtemp(dir="/dev/shm" if kind == "base" else scratch)
            target = ("base" if kind == "base" else "vfs", os.path.join(d, "ycsb.db"), pool_bytes)
            load(target, records, record_bytes)
            runs[kind].append(run_once(target, args, workload, record_bytes, records, dist,
                                       container=kind == "container"))
            shutil.rmtree(d)
    vfs, base = statistics.median(runs["vfs"]), statistics.median(runs["base"])
    result = {
        "workload": workload, "record_bytes": record_bytes, "records": records,
        "distribution": dist, "processes": args.processes, "log_bytes": log_size,
        "vfs_ops_per_s": runs["vfs"], "baseline_ops_per_s": runs["base"],
        "vfs_median": vfs, "baseline_median": base, "ratio": vfs / base if base else None,
    }
    if args.containers:
        c = statistics.median(runs["container"])
        result.update({"container_ops_per_s": runs["container"], "container_median": c,
                       "container_ratio": c / vfs if vfs else None})
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="a,b,c")
    p.add_argument("--record-bytes", default="65536,1024")
    p.add_argument("--records", type=int, default=0,
                   help="records per database (0: 64 MiB of data at the record size)")
    p.add_argument("--distributions", default="zipf,uniform")
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--log-size", default="", help="comma-separated NVARRAY_PM_LOG_SIZE values")
    p.add_argument("--containers", action="store_true",
                   help="also run the VFS's processes each in a mount namespace of its own "
                        "with the database's directory bind-mounted (needs root)")
    p.add_argument("--baseline-mmap", action="store_true",
                   help="let the baseline read through a mapping (pragma mmap_size), as the "
                        "VFS reads the pool's; the seed's baseline, and the default, does not")
    p.add_argument("--json", help="write the results here too (-: on stdout, the table on "
                                  "stderr)")
    args = p.parse_args()
    if not os.path.exists(VFS_LIB):
        fail(f"{VFS_LIB} is missing: run scripts/build_native.sh")
    if args.processes < 1 or args.seconds <= 0 or args.runs < 1:
        fail("--processes, --seconds and --runs must be positive")
    scratch = tempfile.mkdtemp(prefix="nvarray-ycsb-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    os.environ.setdefault("NVARRAY_PM_NVM_DIR", "/dev/shm")
    if args.baseline_mmap:
        os.environ["SQLITE_YCSB_BASELINE_MMAP"] = "1"
    # Both of the pool's tiers faulted in at open (its log and cache on /dev/shm, its file):
    # the baseline's file took its first-touch faults while it was loaded, untimed.
    os.environ.setdefault("NVARRAY_PM_PREFAULT", "1")
    logs = [parse_size(v) for v in args.log_size.split(",") if v] or [0]
    results = []
    table = sys.stderr if args.json == "-" else sys.stdout
    print(f"{'mix':4} {'record':>7} {'records':>8} {'dist':8} {'log':>6} "
          f"{'vfs ops/s':>10} {'base ops/s':>10} {'ratio':>6}"
          + (f" {'container':>10} {'c/p':>5}" if args.containers else ""), file=table)
    try:
        for workload in args.workloads.split(","):
            for rb in (parse_size(v) for v in args.record_bytes.split(",")):
                records = args.records or max(16, (64 << 20) // rb)
                for dist in args.distributions.split(","):
                    for log in logs:
                        r = configuration(args, scratch, workload, rb, records, dist, log)
                        results.append(r)
                        log_text = f"{log >> 20}m" if log else "dflt"
                        extra = (f" {r['container_median']:>10.0f} "
                                 f"{r['container_ratio']:>5.2f}" if args.containers else "")
                        print(f"{workload:4} {rb:>7} {records:>8} {dist:8} {log_text:>6} "
                              f"{r['vfs_median']:>10.0f} {r['baseline_median']:>10.0f} "
                              f"{r['ratio']:>6.2f}{extra}", file=table, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json == "-":
        json.dump({"results": results}, sys.stdout)
        print()
    elif args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results}, f, indent=1)


if __name__ == "__main__":
    main()
