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

3. Server CPU per request (issue 17, `--only cpu`): for 4 KiB random reads at QD 1 and 16,
   random writes at QD 16, and two connections (fio numjobs=2) of random reads at QD 16
   each, the server process's CPU time (utime + stime from /proc/PID/stat, all its threads)
   from just before fio starts to just after it ends, per million requests fio completed
   (its total_ios; no ramp, so every request in the window counts), with fio's own CPU
   (getrusage of the reaped child) beside it. nvarray serves `--preset` (default `dram`,
   RAM backing, device inline on 2 cores): the cheapest committed device, the same as in the
   memory comparison. The machine's other load is measured too (/proc/stat busy time minus
   the server's and fio's): a run during which other processes used more than
   `--max-other-cores` is run again after the machine has been quiet for a second, since a
   server that is descheduled batches more and looks cheaper than it is.

Servers and clients alternate within each round, so both see the same machine; the tables
give the median of the rounds, and the raw fio JSON is kept under target/perf-nbd/.

    ./scripts/perf_nbd.py                 # 3 rounds of 5 s per run
    ./scripts/perf_nbd.py --rounds 5 --seconds 10
    ./scripts/perf_nbd.py --only cpu --rounds 5 --seconds 5
"""

import argparse
import json
import os
import resource
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
CLK_TCK = os.sysconf("SC_CLK_TCK")


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

    def __init__(self, kind, sock, delay_ms=0, preset="dram", extra=()):
        self.sock = sock
        if kind == "nvarray":
            cmd = [NVARRAY, "serve", "--preset", preset, "--size", SIZE,
                   "--listen", f"unix:{sock}", *extra]
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

    def wait_ready(self):
        """Returns once the server answers a handshake. `nvarray serve` listens before it
        prepares the device (a 1 GiB RAM device is zeroed and mapped, ~0.5 s of CPU), so a
        measurement that starts at the socket's appearance would count that."""
        subprocess.run(["nbdinfo", "--size", self.uri], stdout=subprocess.DEVNULL, check=True,
                       timeout=120)

    def cpu_seconds(self):
        """utime + stime of the server process so far, all threads (/proc/PID/stat)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            # Fields after the command name, which is in parentheses and may hold spaces.
            fields = f.read().rsplit(")", 1)[1].split()
        # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

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


def fio_side(out, uri, rw, tag):
    """The read or write side of a finished fio run's JSON, which is kept as `tag`.json."""
    if out.returncode != 0:
        die(f"fio failed on {uri}: {out.stderr.strip()}")
    text = out.stdout[out.stdout.index("{"):]
    with open(os.path.join(OUT, f"{tag}.json"), "w") as f:
        f.write(text)
    job = json.loads(text)["jobs"][0]
    return job["read"] if "read" in rw else job["write"]


def fio(uri, rw, qd, seconds, tag):
    out = subprocess.run(
        ["fio", "--name=nbd", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", "--bs=4k",
         f"--iodepth={qd}", f"--runtime={seconds}", "--time_based", "--ramp_time=1",
         "--output-format=json"],
        capture_output=True, text=True)
    side = fio_side(out, uri, rw, tag)
    pct = side["clat_ns"]["percentile"]
    return {"iops": side["iops"], "p50_us": pct["50.000000"] / 1e3, "p99_us": pct["99.000000"] / 1e3}


def machine_busy_seconds():
    """CPU seconds all cores have spent busy since boot (/proc/stat: all but idle and
    iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def wait_quiet(max_cores, give_up_s=600):
    """Waits (at most `give_up_s`) for a second in which the machine uses at most
    `max_cores`. Returns whether it got one."""
    deadline = time.monotonic() + give_up_s
    while time.monotonic() < deadline:
        b0 = machine_busy_seconds()
        time.sleep(1)
        if machine_busy_seconds() - b0 <= max_cores:
            return True
    return False


def fio_cpu(server, rw, qd, jobs, seconds, tag):
    """One fio run against `server` with no ramp: IOPS, requests, and the CPU seconds the
    server and fio spent over the whole run, and what everything else used."""
    cmd = ["fio", "--name=nbd", "--ioengine=nbd", f"--uri={server.uri}", f"--rw={rw}",
           "--bs=4k", f"--iodepth={qd}", f"--numjobs={jobs}", "--group_reporting",
           f"--runtime={seconds}", "--time_based", "--output-format=json"]
    client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = machine_busy_seconds()
    server0, wall0 = server.cpu_seconds(), time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True)
    server1, wall1 = server.cpu_seconds(), time.monotonic()
    busy1 = machine_busy_seconds()
    client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    side = fio_side(out, server.uri, rw, tag)
    requests = side["total_ios"]
    client = (client1.ru_utime + client1.ru_stime) - (client0.ru_utime + client0.ru_stime)
    other = (busy1 - busy0) - (server1 - server0) - client
    return {"iops": side["iops"], "requests": requests,
            "server_s_per_m": (server1 - server0) / requests * 1e6,
            "client_s_per_m": client / requests * 1e6,
            "server_cores": (server1 - server0) / (wall1 - wall0),
            "other_cores": max(other, 0.0) / (wall1 - wall0)}


CPU_RUNS = [  # (label, rw, QD per connection, connections)
    ("4k randread QD 1", "randread", 1, 1),
    ("4k randread QD 16", "randread", 16, 1),
    ("4k randwrite QD 16", "randwrite", 16, 1),
    ("4k randread 2 conns × QD 16", "randread", 16, 2),
]


def cpu_run(kind, a, sock, extra, rw, qd, jobs, tag):
    """One `fio_cpu` run on a fresh server, repeated (up to 5 times, after a quiet second)
    while other processes used more than `--max-other-cores` during it; the quietest kept."""
    runs = []
    for _ in range(5):
        wait_quiet(a.max_other_cores)
        s = Server(kind, sock, preset=a.preset, extra=extra)
        try:
            s.wait_ready()
            runs.append(fio_cpu(s, rw, qd, jobs, a.seconds, tag))
        finally:
            s.stop()
        if runs[-1]["other_cores"] <= a.max_other_cores:
            break
    return min(runs, key=lambda x: x["other_cores"])


def cpu_mode(a, sock):
    results = {}
    extra = a.serve_args.split() if a.serve_args else []
    for r in range(a.rounds):
        for label, rw, qd, jobs in CPU_RUNS:
            for kind in ["nvarray", "nbdkit"]:
                results.setdefault((kind, label), []).append(
                    cpu_run(kind, a, sock, extra, rw, qd, jobs,
                            f"cpu-{kind}-{rw}-qd{qd}-j{jobs}-{r}"))
    print(f"\n### Server CPU per request (nvarray serve --preset {a.preset}"
          f"{' ' + a.serve_args if a.serve_args else ''}; nbdkit memory)\n")
    print("Server CPU: utime + stime of the server process over the fio run, per million "
          "requests fio completed (CPU-µs per request). fio: fio's own CPU likewise. Cores: "
          "the server's CPU over the run's wall time. Other: cores other processes used "
          f"meanwhile (runs over {a.max_other_cores} are redone). Medians of {a.rounds} "
          "rounds; ratios are nvarray / nbdkit.\n")
    print("| workload | nvarray IOPS | nbdkit IOPS | IOPS ratio | nvarray server CPU s/M | "
          "nbdkit server CPU s/M | CPU ratio | server cores (nvarray / nbdkit) | "
          "fio CPU s/M (nvarray / nbdkit) | other cores |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, _, _, _ in CPU_RUNS:
        med = {k: {m: statistics.median(x[m] for x in results[(k, label)])
                   for m in ["iops", "server_s_per_m", "client_s_per_m", "server_cores",
                             "other_cores"]}
               for k in ["nvarray", "nbdkit"]}
        n, k = med["nvarray"], med["nbdkit"]
        print(f"| {label} | {n['iops']:.0f} | {k['iops']:.0f} | {n['iops'] / k['iops']:.2f}× "
              f"| {n['server_s_per_m']:.2f} | {k['server_s_per_m']:.2f} "
              f"| {n['server_s_per_m'] / k['server_s_per_m']:.2f}× "
              f"| {n['server_cores']:.2f} / {k['server_cores']:.2f} "
              f"| {n['client_s_per_m']:.2f} / {k['client_s_per_m']:.2f} "
              f"| {max(n['other_cores'], k['other_cores']):.2f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--only", choices=["memory", "delay", "cpu"])
    p.add_argument("--preset", default="dram",
                   help="nvarray's device in --only cpu (default dram)")
    p.add_argument("--serve-args", default="",
                   help="more arguments for nvarray serve in --only cpu, e.g. '--completion sleep'")
    p.add_argument("--max-other-cores", type=float, default=0.15,
                   help="--only cpu: redo a run during which other processes used more cores "
                        "than this (default 0.15)")
    a = p.parse_args()
    for tool in ["fio", "nbdkit"] + (["nbdinfo"] if a.only == "cpu" else []):
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

    if a.only == "cpu":
        cpu_mode(a, sock)

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
