#!/usr/bin/env python3
"""Issue 3's benchmarks of the emulator and driver, side by side in one run.

Prints markdown tables for docs/perf.md and keeps every raw JSON report under --out.
Needs root for the kernel comparison (loop device over a file in /dev/shm) and fio.

    sudo ./scripts/perf_emulator.py --out target/perf            # everything, ~4 minutes
    sudo ./scripts/perf_emulator.py --only kernel,ladder         # a subset
    NVARRAY_BIN=/tmp/nvarray-old ./scripts/perf_emulator.py --only overhead,throughput
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

# NVARRAY_BIN runs another build (e.g. one from before a change, for a before/after table).
NVARRAY = os.environ.get(
    "NVARRAY_BIN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "nvarray")
)
SECTIONS = ["overhead", "throughput", "kernel", "threshold", "fidelity", "ladder"]


def system_busy_seconds():
    """CPU seconds the whole machine has been busy (all CPUs, every process and kernel thread,
    from /proc/stat): counts the loop device's kworker that fio's own figure leaves out."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def nvarray(args, out, name):
    """Runs `nvarray bench ... --json`, saves and returns the report (with the machine's busy
    CPU seconds during the run under `system_busy_s`)."""
    cmd = [NVARRAY, "bench", "--json"] + args
    busy = system_busy_seconds()
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    busy = system_busy_seconds() - busy
    report = json.loads(res.stdout)
    report["system_busy_s"] = busy
    with open(os.path.join(out, name + ".json"), "w") as f:
        f.write(res.stdout)
    return report


def cpu_seconds(r):
    return r["cpu_seconds_per_gb"] * (r["read_bytes"] + r["write_bytes"]) / 1e9


def protocol_for(completion):
    """In-data completion is the DC Express protocol's (a read completes in its data), so its
    rows run the same preset speaking it; the others keep the preset's NVMe."""
    return ["--set", "interface.protocol=dc-express"] if completion == "in-data" else []


def us(ns):
    return f"{ns / 1000:.2f}"


def overhead(out, secs):
    print("\n### Emulation overhead: dram, 512 B random reads, QD 1\n")
    print("| device threads | completion | modelled p50 µs (sim) | host p50 µs | overhead p50 µs | modelled p99.99 µs | host p99.99 µs | overhead p99.99 µs | lateness p99 µs | faithful |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = ["--preset", "dram", "--size", "1G", "--rw", "randread", "--bs", "512", "--iodepth", "1"]
    sims = {c: nvarray(base + protocol_for(c) + ["--engine", "sim", "--runtime", "100ms"], out, f"overhead-sim-{c}")
            for c in ["spin", "in-data"]}
    for threads in ["1", "0"]:
        for c in ["spin", "in-data"]:
            sim = sims[c]
            emu = nvarray(base + protocol_for(c) + ["--runtime", secs, "--completion", c, "--device-threads", threads], out, f"overhead-emu-{threads}-{c}")
            s, e = sim["latency_ns"], emu["latency_ns"]
            print(f"| {threads} | {c} | {us(s['p50'])} | {us(e['p50'])} | {us(e['p50'] - s['p50'])} | {us(s['p9999'])} | {us(e['p9999'])} | {us(e['p9999'] - s['p9999'])} | {us(emu['lateness_ns']['p99'])} | {emu['faithful']} |")


def throughput(out, secs):
    print("\n### Throughput: dram, 512 B random reads, QD 32, one host thread\n")
    print("| device threads | completion | IOPS | p50 µs | p99 µs | lateness p99 µs | faithful |")
    print("|---|---|---|---|---|---|---|")
    base = ["--preset", "dram", "--size", "1G", "--rw", "randread", "--bs", "512", "--iodepth", "32", "--runtime", secs]
    for threads in ["1", "0"]:
        for c in ["spin", "in-data"]:
            r = nvarray(base + protocol_for(c) + ["--device-threads", threads, "--completion", c], out, f"qd32-{threads}-{c}")
            print(f"| {threads} | {c} | {r['iops']:.0f} | {us(r['latency_ns']['p50'])} | {us(r['latency_ns']['p99'])} | {us(r['lateness_ns']['p99'])} | {r['faithful']} |")


def fio_loop(out, secs, engine):
    """fio 4 KB random reads, QD 1, on a loop device over a 1 GiB file in /dev/shm."""
    image = "/dev/shm/nvarray-perf.img"
    subprocess.run(["truncate", "-s", "1G", image], check=True)
    subprocess.run(["dd", "if=/dev/zero", f"of={image}", "bs=1M", "count=1024", "status=none"], check=True)
    loop = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", image],
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        busy = system_busy_seconds()
        res = subprocess.run(
            ["fio", "--name=k", f"--filename={loop}", "--rw=randread", "--bs=4k", "--iodepth=1",
             "--direct=1", f"--ioengine={engine}", "--time_based", f"--runtime={secs}",
             "--output-format=json"],
            capture_output=True, text=True, check=True)
        busy = system_busy_seconds() - busy
    finally:
        subprocess.run(["losetup", "-d", loop], check=True)
        os.unlink(image)
    with open(os.path.join(out, f"fio-{engine}.json"), "w") as f:
        f.write(res.stdout)
    job = json.loads(res.stdout)["jobs"][0]
    read = job["read"]
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * read["runtime"] / 1000.0
    return {
        "p50": read["clat_ns"]["percentile"]["50.000000"] + read["slat_ns"]["mean"],
        "iops": read["iops"],
        "iops_per_cpu_s": read["total_ios"] / cpu if cpu > 0 else float("nan"),
        "iops_per_system_cpu_s": read["total_ios"] / busy if busy > 0 else float("nan"),
    }


def kernel(out, secs):
    if shutil.which("fio") is None:
        sys.exit("kernel section: fio not found (Debian: apt-get install fio)")
    if os.geteuid() != 0:
        sys.exit("kernel section: needs root for losetup (run with sudo, or --only without kernel)")
    print("\n### Against the kernel stack: 4 KB random reads, QD 1\n")
    print("IOPS per CPU-second is given twice: from the process's own CPU time (fio's usr+sys, "
          "nvarray's getrusage) and from the whole machine's busy time in /proc/stat during the "
          "run, which also counts the loop device's kworker.\n")
    print("| path | p50 µs | IOPS | IOPS per process CPU-s | IOPS per machine CPU-s |")
    print("|---|---|---|---|---|")
    rows = []
    for engine in ["io_uring", "psync"]:
        k = fio_loop(out, secs.rstrip("s"), engine)
        rows.append((f"fio {engine}, loop device over /dev/shm", k["p50"], k["iops"],
                     k["iops_per_cpu_s"], k["iops_per_system_cpu_s"]))
    base = ["--preset", "dram", "--size", "1G", "--rw", "randread", "--bs", "4k", "--iodepth", "1", "--runtime", secs, "--completion", "spin"]
    for threads in ["1", "0"]:
        r = nvarray(base + ["--device-threads", threads], out, f"kernel-nvarray-{threads}")
        rows.append((f"nvarray dram, device threads {threads}", r["latency_ns"]["p50"], r["iops"],
                     r["requests"] / cpu_seconds(r), r["requests"] / r["system_busy_s"]))
    for name, p50, iops, per_cpu, per_sys in rows:
        print(f"| {name} | {us(p50)} | {iops:.0f} | {per_cpu:.0f} | {per_sys:.0f} |")
    best_kernel = min(rows[:2], key=lambda r: r[1])
    print()
    for name, p50, iops, per_cpu, per_sys in rows[2:]:
        print(f"- {name}: latency {best_kernel[1] / p50:.1f}x lower than {best_kernel[0]}; "
              f"IOPS per CPU-second {per_cpu / max(r[3] for r in rows[:2]):.1f}x (process) and "
              f"{per_sys / max(r[4] for r in rows[:2]):.1f}x (machine) the best kernel path")


def threshold(out, secs):
    print("\n### Spin versus sleep (dram, random reads, QD 1)\n")
    print("| size | spin p50 µs | sleep p50 µs | sleep / spin | spin CPU s | sleep CPU s |")
    print("|---|---|---|---|---|---|")
    for size in ["512", "4k", "16k", "64k", "256k"]:
        base = ["--preset", "dram", "--size", "1G", "--rw", "randread", "--bs", size, "--iodepth", "1", "--runtime", secs, "--buffer-size", "256k", "--device-threads", "1"]
        spin = nvarray(base + ["--completion", "spin"], out, f"threshold-spin-{size}")
        sleep = nvarray(base + ["--completion", "sleep"], out, f"threshold-sleep-{size}")
        a, b = spin["latency_ns"]["p50"], sleep["latency_ns"]["p50"]
        print(f"| {size} | {us(a)} | {us(b)} | {b / a:.2f} | {cpu_seconds(spin):.2f} | {cpu_seconds(sleep):.2f} |")


def fidelity(out, secs):
    print("\n### Fidelity: moneta preset, emulator against simulator, random reads\n")
    print("| size | QD | sim p50 µs | emu p50 µs | p50 ratio | sim MB/s | emu MB/s | bandwidth ratio | faithful |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in ["512", "4k", "64k"]:
        for qd in ["1", "16"]:
            base = ["--preset", "moneta", "--size", "1G", "--rw", "randread", "--bs", size, "--iodepth", qd, "--completion", "spin", "--device-threads", "1"]
            sim = nvarray(base + ["--engine", "sim", "--runtime", "100ms"], out, f"fidelity-sim-{size}-{qd}")
            emu = nvarray(base + ["--runtime", secs], out, f"fidelity-emu-{size}-{qd}")
            sp, ep = sim["latency_ns"]["p50"], emu["latency_ns"]["p50"]
            sb, eb = sim["read_bandwidth_bytes_per_s"], emu["read_bandwidth_bytes_per_s"]
            print(f"| {size} | {qd} | {us(sp)} | {us(ep)} | {ep / sp:.3f} | {sb / 1e6:.0f} | {eb / 1e6:.0f} | {eb / sb:.3f} | {emu['faithful']} |")


def ladder(out, secs):
    print("\n### The Moneta software-stack ladder: moneta preset, 4 KB random reads, QD 1\n")
    print("| stack | p50 µs | mean µs | IOPS | host (software) mean µs | change in software latency |")
    print("|---|---|---|---|---|---|")
    previous = None
    for stack in ["baseline", "nosched", "atomic", "spin"]:
        r = nvarray(["--preset", "moneta", "--size", "1G", "--rw", "randread", "--bs", "4k", "--iodepth", "1",
                     "--runtime", secs, "--stack", stack, "--completion", "spin",
                     "--device-threads", "1"], out, f"ladder-{stack}")
        host = dict(r["breakdown_ns"])["host"] if isinstance(r["breakdown_ns"], list) else r["breakdown_ns"]["host"]
        change = "" if previous is None else f"{(host - previous) / previous * 100:+.0f} %"
        print(f"| {stack} | {us(r['latency_ns']['p50'])} | {us(r['latency_ns']['mean'])} | {r['iops']:.0f} | {us(host)} | {change} |")
        previous = host


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="target/perf", help="directory for the raw JSON reports")
    p.add_argument("--seconds", default="3", help="run length of each emulator run")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated subset of " + ",".join(SECTIONS))
    a = p.parse_args()
    if not os.path.exists(NVARRAY):
        sys.exit(f"{NVARRAY} not found: build it first (./scripts/setup.sh)")
    os.makedirs(a.out, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"commit {commit}, `scripts/perf_emulator.py --seconds {a.seconds}`")
    secs = a.seconds + "s"
    for s in a.only.split(","):
        if s not in SECTIONS:
            sys.exit(f"unknown section {s!r}: expected some of {', '.join(SECTIONS)}")
        globals()[s](a.out, secs)


if __name__ == "__main__":
    main()
