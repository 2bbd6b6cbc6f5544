#!/usr/bin/env python3
"""Issue 3's benchmarks of the emulator and driver, side by side in one run.

Prints markdown tables for docs/perf.md and keeps every raw JSON report under --out.
Needs root for the kernel comparison (loop device over a file in /dev/shm) and fio.

    sudo ./scripts/perf_emulator.py --out target/perf            # everything, ~4 minutes
    sudo ./scripts/perf_emulator.py --only kernel,ladder         # a subset
    NVARRAY_BIN=/tmp/nvarray-old ./scripts/perf_emulator.py --only overhead,throughput
    NVARRAY_BASELINE=/tmp/nvarray-old ./scripts/perf_emulator.py --only scaling   # before/after
    ./scripts/perf_emulator.py --only first-run,probe     # what a new user meets (issue 37), no root
    NVARRAY_BASELINE=/tmp/nvarray-old ./scripts/perf_emulator.py --only device-time   # issue 56

Run `--only first-run` before and after every change to the emulator, the driver or the model.
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
# NVARRAY_BASELINE, for the scaling section: a build to run alternately with NVARRAY_BIN at
# every point, so the before/after ratio is measured under the same machine conditions.
BASELINE = os.environ.get("NVARRAY_BASELINE")
SECTIONS = ["overhead", "throughput", "kernel", "threshold", "fidelity", "ladder", "scaling",
            "first-run", "probe", "device-time"]


def system_busy_seconds():
    """CPU seconds the whole machine has been busy (all CPUs, every process and kernel thread,
    from /proc/stat): counts the loop device's kworker that fio's own figure leaves out."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def nvarray(args, out, name, binary=None):
    """Runs `nvarray bench ... --json` (with `binary`, default NVARRAY), saves and returns the
    report (with the machine's busy CPU seconds during the run under `system_busy_s`)."""
    cmd = [binary or NVARRAY, "bench", "--json"] + args
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


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


# (host threads, device threads) measured on this machine's 2 cores.
SCALING_POINTS = [(1, 0), (2, 0), (1, 1), (2, 1), (2, 2)]
PROJECTED_CORES = [4, 8, 16, 32]


def scaling(out, secs, repeats=3):
    """Host threads x device threads with the `null` device and `dram`, 512 B random reads,
    QD 32 per host thread, spin: IOPS, lateness, faithfulness and the serial part, each point
    run `repeats` times (medians), alternating with NVARRAY_BASELINE when it is set. Then the
    two costs per command and the projection past this machine's cores."""
    cores = os.cpu_count()
    builds = [("after", NVARRAY)] + ([("before", BASELINE)] if BASELINE else [])
    print(f"\n### Scaling: 512 B random reads, QD 32 per host thread, spin ({cores} cores: every figure "
          f"below this heading's projection table is measured on them)\n")
    print("Medians of", repeats, "runs of", secs, "each (range in brackets)" +
          (f"; `before` is `{BASELINE}`, run alternately with `after` at every point." if BASELINE else "."))
    print()
    print("Rows with more spinning threads (host + device) than cores are oversubscribed: the "
          "scheduler's placement decides them, and their runs scatter.\n")
    print("| device | host threads | device threads | build | IOPS | × 1 host inline | lateness p50 µs | lateness p99 µs | faithful | serial ns / command |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    costs, scaling_ratio = {}, {}
    for preset in ["null", "dram"]:
        base_iops = {}
        for host, dev in SCALING_POINTS:
            runs = {label: [] for label, _ in builds}
            for i in range(repeats):
                for label, binary in builds:
                    r = nvarray(["--preset", preset, "--size", "1G", "--rw", "randread", "--bs", "512",
                                 "--iodepth", "32", "--numjobs", str(host), "--device-threads", str(dev),
                                 "--completion", "spin", "--runtime", secs],
                                out, f"scaling-{preset}-{host}h{dev}d-{label}-{i}", binary)
                    runs[label].append(r)
            for label, _ in builds:
                rs = runs[label]
                iops = [r["iops"] for r in rs]
                m = median(iops)
                if (host, dev) == (1, 0):
                    base_iops[label] = m
                serial = [r.get("emulator", {}).get("serial_ns_per_command") for r in rs]
                serial = [x for x in serial if x is not None]
                serial_s = f"{median(serial):.0f}" if serial else "not measured"
                faithful = sum(1 for r in rs if r["faithful"])
                over = " (oversubscribed)" if host + dev > cores else ""
                print(f"| {preset} | {host} | {dev}{over} | {label} | {m / 1e6:.2f} M [{min(iops) / 1e6:.2f}–{max(iops) / 1e6:.2f}] "
                      f"| {m / base_iops[label]:.2f}× | {us(median([r['lateness_ns']['p50'] for r in rs]))} "
                      f"| {us(median([r['lateness_ns']['p99'] for r in rs]))} | {faithful}/{len(rs)} | {serial_s} |")
                if label == "after" and (host, dev) == (1, 0) and serial:
                    costs[preset] = (median(serial), 1e9 / m - median(serial))
                if label == "after" and (host, dev) == (2, 0):
                    scaling_ratio[preset] = m / base_iops[label]
    # The peer: the same work with nothing shared at all, two separate emulators (processes)
    # at once, one host thread each. Their summed IOPS over one's alone is what this machine's
    # two cores give this workload (memory-bound work scales by about that much here, not 2x).
    print("\n#### The machine's own ceiling: two independent emulators at once (nothing shared)\n")
    print("| device | 1 process IOPS | 2 processes, summed IOPS | ratio | 2 host threads inline, one device (after) | as a share of the ceiling |")
    print("|---|---|---|---|---|---|")
    for preset in ["null", "dram"]:
        single, pair = [], []
        for i in range(repeats):
            args = ["--preset", preset, "--size", "1G", "--rw", "randread", "--bs", "512", "--iodepth", "32",
                    "--numjobs", "1", "--device-threads", "0", "--completion", "spin", "--runtime", secs]
            single.append(nvarray(args, out, f"ceiling-{preset}-1-{i}")["iops"])
            procs = [subprocess.Popen([NVARRAY, "bench", "--json"] + args, stdout=subprocess.PIPE, text=True)
                     for _ in range(2)]
            pair.append(sum(json.loads(p.communicate()[0])["iops"] for p in procs))
        s1, s2 = median(single), median(pair)
        two_threads = scaling_ratio[preset]
        print(f"| {preset} | {s1 / 1e6:.2f} M | {s2 / 1e6:.2f} M | {s2 / s1:.2f}× | {two_threads:.2f}× | {two_threads / (s2 / s1) * 100:.0f} % |")
    # Where the device keeps up: one request in flight per host thread.
    print("\n#### Lateness where the device keeps up: dram, 512 B random reads, QD 1 per host thread, spin (after)\n")
    print("| host threads | device threads | IOPS | lateness p50 µs | lateness p99 µs | faithful |")
    print("|---|---|---|---|---|---|")
    for host, dev in [(1, 0), (2, 0), (1, 1)]:
        rs = [nvarray(["--preset", "dram", "--size", "1G", "--rw", "randread", "--bs", "512", "--iodepth", "1",
                       "--numjobs", str(host), "--device-threads", str(dev), "--completion", "spin",
                       "--runtime", secs], out, f"scaling-qd1-{host}h{dev}d-{i}")
              for i in range(repeats)]
        print(f"| {host} | {dev} | {median([r['iops'] for r in rs]) / 1e6:.2f} M "
              f"| {us(median([r['lateness_ns']['p50'] for r in rs]))} | {us(median([r['lateness_ns']['p99'] for r in rs]))} "
              f"| {sum(1 for r in rs if r['faithful'])}/{len(rs)} |")
    print("\n#### Costs per command, measured (after)\n")
    print("serial = the time the timing model's lock is held (the model and the hand-off) over the commands "
          "handed to it, from the runs' `serial_ns_per_command`; parallel = everything else one thread does "
          "per command = 1 / IOPS of one inline host thread (it runs host and device and is never idle at "
          "QD 32) − serial.\n")
    print("| device | serial ns | parallel ns |")
    print("|---|---|---|")
    for preset, (serial, parallel) in costs.items():
        print(f"| {preset} | {serial:.0f} | {parallel:.0f} |")
    print("\n#### PROJECTION, not measured: IOPS = min(cores × 1 / parallel, 1 / serial)\n")
    print("| device | " + " | ".join(f"{c} cores" for c in PROJECTED_CORES) + " | bound by |")
    print("|---|" + "---|" * len(PROJECTED_CORES) + "---|")
    for preset, (serial, parallel) in costs.items():
        cells = [min(c * 1e9 / parallel, 1e9 / serial) for c in PROJECTED_CORES]
        knee = 1e9 / serial / (1e9 / parallel)
        print(f"| {preset} | " + " | ".join(f"{x / 1e6:.1f} M" for x in cells) +
              f" | the serial part beyond {knee:.0f} cores |")


def spinner(out, seconds):
    """The independent spinner (scripts/spinner.c, compiled once into --out): this machine's
    jitter measured apart from the emulator, in the probe's own statistic."""
    binary = os.path.join(out, "spinner")
    source = os.path.join(os.path.dirname(__file__), "spinner.c")
    if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(source):
        subprocess.run(["cc", "-O2", "-o", binary, source], check=True)
    res = subprocess.run([binary, str(seconds)], capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def verdict_of(r):
    return r.get("verdict", "faithful" if r["faithful"] else "not-faithful")


# The README's main job (`nvarray bench`, its defaults), then a matrix around it.
FIRST_RUN = [("README main job: moneta read 4k QD 1", [])] + [
    (f"moneta {rw} {bs} QD {qd}", ["--rw", rw, "--bs", bs, "--iodepth", qd])
    for bs in ["512", "4k", "64k"] for rw in ["read", "randread"] for qd in ["1", "16"]
] + [
    ("dram randread 4k QD 1", ["--preset", "dram", "--rw", "randread", "--bs", "4k"]),
    ("null randread 4k QD 1", ["--preset", "null", "--rw", "randread", "--bs", "4k"]),
]


def first_run(out, secs, runs=5):
    """What a new user meets first (issue 37): each configuration `runs` times at its default
    length (the README's main job runs 100 ms), alternating with 0.3 s of the independent
    spinner, so the probe's jitter has a measure of the machine beside it."""
    print(f"\n### First run: the README's main job and a matrix around it ({runs} runs each)\n")
    print("Verdict counts; then medians over the runs: the emulator's own lateness (completions "
          "not due in a pause of the machine), the share of machine-late completions, the probe's "
          "jitter p99 and the independent spinner's just before.\n")
    print("| configuration | faithful | machine-limited | NOT FAITHFUL | own p50 µs | own p99 µs (max over runs) | machine-late % | probe p99 µs | spinner p99 µs | IOPS | why not faithful (first run that was not) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, args in FIRST_RUN:
        counts = {"faithful": 0, "machine-limited": 0, "not-faithful": 0}
        own50, own99, share, probe, spin, iops, why = [], [], [], [], [], [], ""
        for i in range(runs):
            spin.append(spinner(out, 0.3)["p99"])
            r = nvarray(args, out, f"first-run-{name.replace(' ', '_')}-{i}")
            v = verdict_of(r)
            counts[v] += 1
            l = r["lateness_ns"]
            own50.append(l["own_p50"])
            own99.append(l["own_p99"])
            share.append(l["machine_late_percent"])
            probe.append((r.get("machine_jitter_ns") or {}).get("p99", float("nan")))
            iops.append(r["iops"])
            if v == "not-faithful" and not why:
                why = (r["unfaithful_reason"] or "")[:160]
        print(f"| {name} | {counts['faithful']} | {counts['machine-limited']} | {counts['not-faithful']} "
              f"| {us(median(own50))} | {us(median(own99))} ({us(max(own99))}) | {median(share):.2f} "
              f"| {us(median(probe))} | {us(median(spin))} | {median(iops):.0f} | {why} |")


def probe(out, secs, pairs=5):
    """The probe against the independent spinner (issue 37): alternating pairs, the spinner for
    1 s just before the README's main job for 1 s; the probe's p99 should be within 2x."""
    print(f"\n### The jitter probe beside an independent spinner ({pairs} alternating pairs)\n")
    print("| pair | spinner p99 µs | spinner p99.99 µs | probe p99 µs | probe p99.99 µs | probe / spinner (p99) | within 2x |")
    print("|---|---|---|---|---|---|---|")
    within = 0
    for i in range(pairs):
        s = spinner(out, 1.0)
        r = nvarray(["--runtime", "1s"], out, f"probe-{i}")
        j = r.get("machine_jitter_ns") or {}
        ratio = j.get("p99", float("nan")) / max(s["p99"], 1)
        ok = 0.5 <= ratio <= 2.0
        within += ok
        print(f"| {i + 1} | {us(s['p99'])} | {us(s['p9999'])} | {us(j.get('p99', float('nan')))} "
              f"| {us(j.get('p9999', float('nan')))} | {ratio:.2f} | {'yes' if ok else 'no'} |")
    print(f"\nwithin 2x in {within} of {pairs} pairs")


# Issue 56's cases: flash with and without its FTL's preconditioning, paced and unpaced, QD 1
# and 32, reads, writes and 70/30; the README's main job; Moneta's 512 B rate. 256 MiB each
# (DEVICE_TIME_SIZE=8g for the large device).
DEVICE_TIME_SIZE = os.environ.get("DEVICE_TIME_SIZE", "256m")
TLC = ["--preset", "tlc", "--size", DEVICE_TIME_SIZE]
# The FTL after a drive-write of random writes; 16 KiB erase blocks (4 pages a block, 256 a
# line) give the spare area enough lines at 256 MiB (the preset's 16 MiB blocks make 1 GiB lines).
PRECONDITIONED = ["--set", "memory.erase_block_bytes=16k", "--precondition", "random:1"]
DEVICE_TIME = [
    ("tlc randread 4k QD 1 at 1,000 IOPS", TLC + ["--rw", "randread", "--rate_iops", "1000"]),
    ("tlc randread 4k QD 1", TLC + ["--rw", "randread"]),
    ("tlc randread 4k QD 16", TLC + ["--rw", "randread", "--iodepth", "16"]),
    ("tlc randread 4k QD 32", TLC + ["--rw", "randread", "--iodepth", "32"]),
    ("tlc randwrite 4k QD 1", TLC + ["--rw", "randwrite"]),
    ("tlc randwrite 4k QD 32", TLC + ["--rw", "randwrite", "--iodepth", "32"]),
    ("tlc randrw 70/30 4k QD 32", TLC + ["--rw", "randrw", "--rwmixread", "70", "--iodepth", "32"]),
    ("tlc randwrite 4k QD 32, preconditioned, 16 KiB erase blocks",
     TLC + PRECONDITIONED + ["--rw", "randwrite", "--iodepth", "32"]),
    ("tlc randread 4k QD 1, preconditioned", TLC + PRECONDITIONED + ["--rw", "randread"]),
    ("tlc randread 4k QD 32, preconditioned",
     TLC + PRECONDITIONED + ["--rw", "randread", "--iodepth", "32"]),
    ("tlc randwrite 4k QD 1, preconditioned", TLC + PRECONDITIONED + ["--rw", "randwrite"]),
    ("tlc randrw 70/30 4k QD 32, preconditioned",
     TLC + PRECONDITIONED + ["--rw", "randrw", "--rwmixread", "70", "--iodepth", "32"]),
    ("README main job: moneta read 4k QD 1", []),
    ("moneta randread 512 QD 16", ["--rw", "randread", "--bs", "512", "--iodepth", "16"]),
]


DEVICE_TIME_RUNS = int(os.environ.get("DEVICE_TIME_RUNS", "3"))


def device_time(out, secs, runs=DEVICE_TIME_RUNS):
    """Issue 56: each case `runs` times with the build before (NVARRAY_BASELINE) and this one,
    alternating, and once on the simulator: verdicts, the emulator's own p99 lateness, the
    completions due in a machine pause and after a late wake-up, the device threads' CPU and
    the IOPS against the simulator's."""
    builds = [("before", BASELINE), ("after", NVARRAY)] if BASELINE else [("this build", NVARRAY)]
    print(f"\n### Device time (issue 56): {runs} runs of {secs} per build, alternating\n")
    print("| case | build | faithful / machine-limited / NOT | own p99 µs (median, max) | machine-late % | wake-late % | device CPU % of a core | IOPS (median) | IOPS / sim |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, args in DEVICE_TIME:
        args = args + ["--runtime", secs]
        tag = name.replace(" ", "_").replace("/", "-").replace(",", "")
        sim = nvarray(args + ["--engine", "sim"], out, f"device-time-{tag}-sim")
        rows = {label: [] for label, _ in builds}
        for i in range(runs):
            for label, binary in builds:
                rows[label].append(nvarray(args, out, f"device-time-{tag}-{label.replace(' ', '_')}-{i}", binary))
        for label, _ in builds:
            rs = rows[label]
            counts = [sum(verdict_of(r) == v for r in rs) for v in ["faithful", "machine-limited", "not-faithful"]]
            own = [r["lateness_ns"]["own_p99"] for r in rs]
            machine = median([r["lateness_ns"]["machine_late_percent"] for r in rs])
            wake = median([r["lateness_ns"].get("wake_late_percent", 0.0) for r in rs])
            cpu = [(r.get("emulator") or {}).get("device_cpu_per_second") for r in rs]
            cpu = "-" if None in cpu else f"{median(cpu) * 100:.1f}"
            iops = median([r["iops"] for r in rs])
            print(f"| {name} | {label} | {' / '.join(map(str, counts))} | {us(median(own))} ({us(max(own))}) "
                  f"| {machine:.2f} | {wake:.2f} | {cpu} | {iops:.0f} | {iops / max(sim['iops'], 1e-9):.3f} |")


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
        globals()[s.replace("-", "_")](a.out, secs)


if __name__ == "__main__":
    main()
