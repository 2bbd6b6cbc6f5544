#!/usr/bin/env python3
"""Issue 4's NBD benchmarks: `nvarray serve` next to nbdkit, fio's nbd engine, Unix socket.

1. Against nbdkit's memory plugin: 4 KiB random reads and writes at QD 16 (IOPS) and QD 1
   (p50 latency); nvarray serves the `dram` preset from RAM.
2. Against nbdkit's delay filter: an added latency of about 1 ms and 10 ms on 4 KiB random
   reads at QD 1. nbdkit: memory plugin + `rdelay=Nms`, target N ms. nvarray: the `dram`
   preset with N ms added to its media read latency (`--set memory.read_latency_ns`); its
   target is what the model says that adds, from `nvarray sim` on the same device (a 4 KiB
   read takes two rows in sequence on each bank of this preset, so it adds 2N ms). Each
   server's error is its p50 and p99 minus (its own no-delay p50 + its target), so the base
   cost of each path is taken out and only the added latency's accuracy is compared.

Servers and clients alternate within each round, so both see the same machine; the tables
give the median of the rounds, and the raw fio JSON is kept under target/perf-nbd/.

    ./scripts/perf_nbd.py                 # 3 rounds of 5 s per run
    ./scripts/perf_nbd.py --rounds 5 --seconds 10
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVARRAY = os.environ.get("NVARRAY", os.path.join(ROOT, "target/release/nvarray"))
OUT = os.path.join(ROOT, "target/perf-nbd")
SIZE = "1G"
DRAM_READ_LATENCY_NS = 70  # crates/nvarray-model/src/presets/dram.toml


def die(msg):
    print(f"perf_nbd.py: {msg}", file=sys.stderr)
    sys.exit(1)


def wait_socket(path, proc, what):
    deadline = time.time() + 60
    while not os.path.exists(path):
        if proc.poll() is not None:
            die(f"{what} exited with {proc.returncode} before listening")
        if time.time() > deadline:
            die(f"{what} did not start listening on {path}")
        time.sleep(0.02)


class Server:
    """`nvarray serve` or nbdkit on a Unix socket, stopped on exit."""

    def __init__(self, kind, sock, delay_ms=0):
        self.sock = sock
        if kind == "nvarray":
            cmd = [NVARRAY, "serve", "--preset", "dram", "--size", SIZE,
                   "--listen", f"unix:{sock}"]
            if delay_ms:
                cmd += delay_set(delay_ms)
            self.uri = f"nbd+unix:///nvarray?socket={sock}"
        else:
            cmd = ["nbdkit", "--foreground", "--exit-with-parent", "--unix", sock]
            if delay_ms:
                cmd += ["--filter=delay"]
            cmd += ["memory", SIZE]
            if delay_ms:
                cmd += [f"rdelay={delay_ms}ms"]
            self.uri = f"nbd+unix:///?socket={sock}"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_socket(sock, self.proc, kind)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if os.path.exists(self.sock):
            os.unlink(self.sock)


def delay_set(delay_ms):
    return ["--set", f"memory.read_latency_ns={DRAM_READ_LATENCY_NS + delay_ms * 1_000_000}"]


def modelled_added_us(delay_ms):
    """What the model says N ms more media latency adds to a 4 KiB random read at QD 1."""
    def p50(extra):
        out = subprocess.run([NVARRAY, "sim", "--preset", "dram", "--set", "memory.capacity_bytes=1g",
                              *extra, "--rw", "randread", "--bs", "4k", "--number_ios", "200", "--json"],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["latency_ns"]["p50"] / 1e3
    return p50(delay_set(delay_ms)) - p50([])


def fio(uri, rw, qd, seconds, tag):
    out = subprocess.run(
        ["fio", "--name=nbd", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", "--bs=4k",
         f"--iodepth={qd}", f"--runtime={seconds}", "--time_based", "--ramp_time=1",
         "--output-format=json"],
        capture_output=True, text=True)
    if out.returncode != 0:
        die(f"fio failed on {uri}: {out.stderr.strip()}")
    text = out.stdout[out.stdout.index("{"):]
    with open(os.path.join(OUT, f"{tag}.json"), "w") as f:
        f.write(text)
    job = json.loads(text)["jobs"][0]
    side = job["read"] if "read" in rw else job["write"]
    pct = side["clat_ns"]["percentile"]
    return {"iops": side["iops"], "p50_us": pct["50.000000"] / 1e3, "p99_us": pct["99.000000"] / 1e3}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--only", choices=["memory", "delay"])
    a = p.parse_args()
    for tool in ["fio", "nbdkit"]:
        if not shutil.which(tool):
            die(f"{tool} not found (Debian: apt-get install {tool})")
    if not os.access(NVARRAY, os.X_OK):
        die(f"{NVARRAY} not found: cargo build --release -p nvarray")
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp()
    sock = os.path.join(work, "nbd.sock")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    print(f"commit {commit}, {time.strftime('%Y-%m-%d')}, {a.rounds} rounds of {a.seconds} s, "
          f"fio {subprocess.run(['fio', '--version'], capture_output=True, text=True).stdout.strip()}, "
          f"{subprocess.run(['nbdkit', '--version'], capture_output=True, text=True).stdout.strip()}")

    if a.only in (None, "memory"):
        runs = [(rw, qd) for rw in ["randread", "randwrite"] for qd in [16, 1]]
        results = {}
        for r in range(a.rounds):
            for rw, qd in runs:
                for kind in ["nvarray", "nbdkit"]:
                    s = Server(kind, sock)
                    try:
                        results.setdefault((kind, rw, qd), []).append(
                            fio(s.uri, rw, qd, a.seconds, f"memory-{kind}-{rw}-qd{qd}-{r}"))
                    finally:
                        s.stop()
        print("\n### Against nbdkit's memory plugin (dram preset, RAM)\n")
        print("| workload | QD | nvarray IOPS | nbdkit IOPS | IOPS ratio | nvarray p50 µs | nbdkit p50 µs | p50 ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for rw, qd in runs:
            med = {k: {m: statistics.median(x[m] for x in results[(k, rw, qd)])
                       for m in ["iops", "p50_us"]} for k in ["nvarray", "nbdkit"]}
            n, k = med["nvarray"], med["nbdkit"]
            print(f"| 4k {rw} | {qd} | {n['iops']:.0f} | {k['iops']:.0f} | {n['iops'] / k['iops']:.2f}× "
                  f"| {n['p50_us']:.1f} | {k['p50_us']:.1f} | {n['p50_us'] / k['p50_us']:.2f} |")

    if a.only in (None, "delay"):
        results = {}
        for r in range(a.rounds):
            for delay in [0, 1, 10]:
                for kind in ["nvarray", "nbdkit"]:
                    s = Server(kind, sock, delay)
                    try:
                        results.setdefault((kind, delay), []).append(
                            fio(s.uri, "randread", 1, a.seconds, f"delay-{kind}-{delay}ms-{r}"))
                    finally:
                        s.stop()
        print("\n### Added latency: 4 KiB random reads, QD 1 (error = measured − (own base p50 + added target))\n")
        print("| delay | server | added target µs | base p50 µs | p50 µs | p99 µs | p50 error µs | p99 error µs |")
        print("|---|---|---|---|---|---|---|---|")
        for delay in [1, 10]:
            for kind in ["nvarray", "nbdkit"]:
                added = modelled_added_us(delay) if kind == "nvarray" else delay * 1000.0
                base = statistics.median(x["p50_us"] for x in results[(kind, 0)])
                p50 = statistics.median(x["p50_us"] for x in results[(kind, delay)])
                p99 = statistics.median(x["p99_us"] for x in results[(kind, delay)])
                target = base + added
                print(f"| {delay} ms | {kind} | {added:.1f} | {base:.1f} | {p50:.1f} | {p99:.1f} | "
                      f"{p50 - target:+.1f} ({100 * (p50 - target) / added:+.1f} %) | "
                      f"{p99 - target:+.1f} ({100 * (p99 - target) / added:+.1f} %) |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
