#!/usr/bin/env python3
"""Benchmarks of the transactional NVM library (issue 5), side by side with PMDK.

Builds the PMDK peer (crates/nvarray-pm/peer/pmdk_peer.c, needs gcc and libpmemobj-dev),
then runs in one session, alternating the two so drift hits both alike:
  tx     256-byte transactions, 1 and 4 threads: nvarray-pm vs PMDK libpmemobj
  pages  vNVML's microbenchmark: N bytes into every 4 KiB page of an array, 1 and 16 passes:
         nvarray-pm vs PMDK vs plain unlogged stores
  ycsb   key-value mixes, 1 KB and 64 KB records, uniform and zipfian, normalised to unlogged
         writes; log-size and cache-size sweeps with plots (docs/img/pm-*.svg)

Everything lives on /dev/shm (both tiers and PMDK's pool): "the same /dev/shm storage".
PMDK runs with PMEM_IS_PMEM_FORCE=1 (cache-line flushes, as nvarray-pm does); without it PMDK
msyncs every persist on tmpfs. Usage: scripts/perf_pm.py [--runs 5] [--seconds 2] [--only tx]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVARRAY = os.path.join(ROOT, "target", "release", "nvarray")
PEER_SRC = os.path.join(ROOT, "crates", "nvarray-pm", "peer", "pmdk_peer.c")
PEER = os.path.join(ROOT, "target", "pmdk_peer")
SHM = "/dev/shm"


def fail(msg):
    sys.exit(f"perf_pm: {msg}")


def build_peer():
    if shutil.which("gcc") is None:
        fail("gcc is missing (apt-get install gcc)")
    if not os.path.exists("/usr/include/libpmemobj.h"):
        fail("libpmemobj-dev is missing (apt-get install libpmemobj-dev)")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", PEER, PEER_SRC, "-lpmemobj", "-lpmem",
                    "-lpthread"], check=True)


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def ours(*args):
    return run_json([NVARRAY, "pm-bench", *args, "--data-dir", SHM, "--nvm-dir", SHM])


def pmdk(*args):
    return run_json([PEER, *args], env={"PMEM_IS_PMEM_FORCE": "1"})


def tx(a):
    print("## tx: 256-byte transactions (tx/s; median of %d runs of %ss)" % (a.runs, a.seconds))
    print("%-8s %14s %14s %8s   %s" % ("threads", "nvarray-pm", "PMDK", "ratio", "raw (ours | pmdk)"))
    for threads in (1, 4):
        mine, theirs, p50s = [], [], []
        for _ in range(a.runs):
            r = ours("tx", "--threads", str(threads), "--seconds", str(a.seconds))[0]
            mine.append(r["tx_per_s"])
            p50s.append((r["p50_ns"], None))
            p = pmdk("tx", "--pool", f"{SHM}/pmdk-peer.pool", "--threads", str(threads),
                     "--seconds", str(a.seconds))[0]
            theirs.append(p["tx_per_s"])
            p50s[-1] = (r["p50_ns"], p["p50_ns"])
        m, t = statistics.median(mine), statistics.median(theirs)
        print("%-8d %14.0f %14.0f %7.2fx   %s | %s  p50 ns (ours, pmdk log2 bucket): %s" % (
            threads, m, t, m / t, " ".join("%.0f" % x for x in mine),
            " ".join("%.0f" % x for x in theirs), p50s))


def pages(a):
    print("## pages: %s array, N bytes per 4 KiB page, one transaction per page (seconds)" % a.array)
    print("%-6s %-6s %10s %10s %10s %12s" % ("N", "passes", "nvarray-pm", "PMDK", "plain", "ours/PMDK"))
    for passes in (1, 16):
        for n in (64, 256, 1024, 4096):
            common = ["--array-bytes", a.array, "--write-bytes", str(n), "--passes", str(passes)]
            mine = ours("pages", *common)[0]["seconds"]
            theirs = pmdk("pages", "--pool", f"{SHM}/pmdk-peer.pool", *common)[0]["seconds"]
            plain = run_json([PEER, "plain", "--file", f"{SHM}/plain-peer.dat", *common])[0]["seconds"]
            print("%-6d %-6d %10.3f %10.3f %10.3f %11.2fx" % (n, passes, mine, theirs, plain,
                                                               mine / theirs))


def ycsb(a):
    print("## ycsb: throughput normalised to unlogged writes on a plain mapping")
    print("%-7s %-8s %-6s %12s %12s %8s" % ("record", "dist", "W/R", "library/s", "baseline/s", "norm"))
    for record, records, ops in (("1k", 100_000, 200_000), ("64k", 4_000, 20_000)):
        for dist in ("uniform", "zipf"):
            for w in (95, 50, 30, 5, 0):
                r = ours("ycsb", "--record-bytes", record, "--records", str(records),
                         "--ops", str(ops), "--dist", dist, "--write-pct", str(w))[0]
                print("%-7s %-8s %2d/%-3d %12.0f %12.0f %8.2f" % (
                    record, dist, w, 100 - w, r["library_ops_per_s"], r["baseline_ops_per_s"],
                    r["normalised"]))
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    for sweep, values, fixed in (("log-size", "1m,4m,16m,64m,256m", ["--cache-size", "256m"]),
                                 ("cache-size", "16m,64m,256m,1g", ["--log-size", "64m"])):
        plot = os.path.join(ROOT, "docs", "img", f"pm-ycsb-{sweep}.svg")
        rows = ours("ycsb", "--record-bytes", "1k", "--records", "400000", "--ops", "400000",
                    "--write-pct", "95", "--sweep", sweep, "--values", values, "--plot", plot,
                    *fixed)
        print(f"## sweep {sweep} (1 KB records, 400 K records = 391 MiB, uniform, 95/5) -> {plot}")
        for r in rows:
            print("  log %5d MiB  cache %5d MiB  normalised %.2f  log-full waits %d  write-backs %d" % (
                r["log_size"] >> 20, r["cache_size"] >> 20, r["normalised"], r["log_full_waits"],
                r["writeback_rounds"]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--array", default="2g", help="array size of the pages benchmark")
    p.add_argument("--only", choices=["tx", "pages", "ycsb"])
    a = p.parse_args()
    if not os.path.exists(NVARRAY):
        fail(f"{NVARRAY} is missing: cargo build --release")
    build_peer()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"# commit {commit}, {os.cpu_count()} cores")
    for name, f in (("tx", tx), ("pages", pages), ("ycsb", ycsb)):
        if a.only in (None, name):
            f(a)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
