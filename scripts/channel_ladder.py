#!/usr/bin/env python3
"""The last rung of Moneta's software ladder: the kernel's paths against a user-space channel.

Real fio, 4 KiB random reads and writes, against one emulated device reached three ways:

  nbd       `nvarray serve --listen unix:...`, fio's nbd engine (a socket, the kernel's
            Unix-domain path, a server thread: NBD's request loop);
  fuse      `nvarray mount` + a loop device (direct I/O) on DIR/disk: fio's psync / libaio
            engines through the kernel's block layer and FUSE (needs root);
  channel   `nvarray serve --channels unix:...`, fio's external engine (target/native/
            nvarray-fio.so, built by scripts/build_native.sh): no system call per command.

NBD and the channel are served by one `nvarray serve` (the same device); FUSE by `nvarray
mount` on the same preset. Each workload runs once per front per round, fronts alternating,
and the tables give the median of the rounds. QD 1 gives latency (fio's p50 completion
latency, and its overhead over the model: the simulator's p50 for the same job), QD 16 gives
IOPS and bandwidth. Moneta-D's published figures (Caulfield et al., ASPLOS'12, abstract):
4 KB writes with 60 % lower latency and 7.2x the bandwidth through the user-space interface
than through the kernel.

    ./scripts/channel_ladder.py                        # moneta and dram, 3 rounds of 2 s
    ./scripts/channel_ladder.py --presets dram --rounds 5 --seconds 5
    ./scripts/channel_ladder.py --json                 # one JSON object on stdout

Raw fio JSON is kept under target/channel-ladder/ (NVARRAY_LADDER_OUT). `nvarray repro moneta`
runs this script (its `moneta-channels` figure) with NVARRAY and NVARRAY_FIO_ENGINE set.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVARRAY = os.environ.get("NVARRAY", os.path.join(ROOT, "target/release/nvarray"))
ENGINE = os.environ.get("NVARRAY_FIO_ENGINE", os.path.join(ROOT, "target/native/nvarray-fio.so"))
OUT = os.environ.get("NVARRAY_LADDER_OUT", os.path.join(ROOT, "target/channel-ladder"))
SIZE = "1g"
WORKLOADS = [("randread", 1), ("randwrite", 1), ("randread", 16), ("randwrite", 16)]


def die(msg):
    print(f"channel_ladder.py: {msg}", file=sys.stderr)
    sys.exit(1)


def wait_for(what, ready, proc, err_path):
    deadline = time.time() + 120
    while not ready():
        if proc.poll() is not None:
            die(f"{what} exited: {open(err_path).read().strip()}")
        if time.time() > deadline:
            die(f"{what} did not come up in 120 s")
        time.sleep(0.05)


def fio(name, args, seconds):
    """Runs fio; returns (iops, p50 completion latency us, bandwidth MB/s) of the job's one
    direction."""
    cmd = ["fio", f"--name={name}", "--bs=4k", "--time_based", f"--runtime={seconds}s",
           "--ramp_time=0.2s", "--output-format=json"] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"fio failed ({' '.join(cmd)}): {r.stderr.strip() or r.stdout.strip()}")
    # fio's nbd engine says "fio: connected to NBD server" before the JSON.
    text = r.stdout[r.stdout.index("{"):]
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        f.write(text)
    job = json.loads(text)["jobs"][0]
    d = job["read"] if job["read"]["io_bytes"] > 0 else job["write"]
    return d["iops"], d["clat_ns"]["percentile"]["50.000000"] / 1e3, d["bw_bytes"] / 1e6


def model_p50_us(preset, rw):
    """The simulator's p50 latency for one 4 KiB request at QD 1: the model's own time."""
    r = subprocess.run([NVARRAY, "sim", "--preset", preset, "--size", SIZE, "--rw", rw,
                        "--bs", "4k", "--iodepth", "1", "--number_ios", "20000", "--json"],
                       capture_output=True, text=True, check=True)
    report = json.loads(r.stdout)
    direction = report["read"] if rw == "randread" else report["write"]
    return direction["latency_ns"]["p50"] / 1e3


class Served:
    """`nvarray serve` with NBD and channels on one device."""

    def __init__(self, preset, work):
        self.nbd, self.ch = os.path.join(work, "nbd.sock"), os.path.join(work, "ch.sock")
        self.err = os.path.join(OUT, f"serve-{preset}.err")
        self.proc = subprocess.Popen(
            [NVARRAY, "serve", "--preset", preset, "--size", SIZE, "--listen",
             f"unix:{self.nbd}", "--channels", f"unix:{self.ch}", "--json"],
            stdout=open(os.path.join(OUT, f"serve-{preset}.json"), "w"),
            stderr=open(self.err, "w"))
        wait_for("nvarray serve", lambda: os.path.exists(self.ch) and os.path.exists(self.nbd),
                 self.proc, self.err)

    def args(self, front, rw, qd):
        if front == "nbd":
            return ["--ioengine=nbd", f"--uri=nbd+unix:///nvarray?socket={self.nbd}",
                    f"--rw={rw}", f"--iodepth={qd}"]
        return [f"--ioengine=external:{ENGINE}", f"--filename={self.ch}", f"--rw={rw}",
                f"--iodepth={qd}"]

    def stop(self):
        self.proc.send_signal(2)
        self.proc.wait(timeout=60)


class Mounted:
    """`nvarray mount` and a direct-I/O loop device on its disk file."""

    def __init__(self, preset, work):
        self.dir = os.path.join(work, f"fuse-{preset}")
        os.mkdir(self.dir)
        self.err = os.path.join(OUT, f"mount-{preset}.err")
        self.proc = subprocess.Popen(
            [NVARRAY, "mount", self.dir, "--preset", preset, "--size", SIZE, "--json"],
            stdout=open(os.path.join(OUT, f"mount-{preset}.json"), "w"),
            stderr=open(self.err, "w"))
        wait_for("nvarray mount", lambda: f" {self.dir} fuse" in open("/proc/mounts").read(),
                 self.proc, self.err)
        self.loop = subprocess.run(["losetup", "--find", "--show", "--direct-io=on",
                                    os.path.join(self.dir, "disk")],
                                   capture_output=True, text=True, check=True).stdout.strip()

    def args(self, front, rw, qd):
        engine = "psync" if qd == 1 else "libaio"
        return [f"--ioengine={engine}", f"--filename={self.loop}", "--direct=1",
                f"--rw={rw}", f"--iodepth={qd}"]

    def stop(self):
        subprocess.run(["losetup", "-d", self.loop], check=False)
        self.proc.send_signal(2)
        self.proc.wait(timeout=60)


def measure(preset, fronts, rounds, seconds, work):
    """{front: {workload: (iops, p50 us, MB/s)}}, medians over the rounds."""
    runs = {f: {w: [] for w in WORKLOADS} for f in fronts}
    servers = {}
    try:
        served = Served(preset, work)
        servers.update({"nbd": served, "channel": served})
        for rnd in range(rounds):
            for rw, qd in WORKLOADS:
                for front in fronts if rnd % 2 == 0 else list(reversed(fronts)):
                    if front == "fuse":
                        continue
                    runs[front][(rw, qd)].append(fio(
                        f"{preset}-{front}-{rw}-qd{qd}-{rnd}",
                        served.args(front, rw, qd), seconds))
        served.stop()
        servers.clear()
        if "fuse" in fronts:
            mounted = Mounted(preset, work)
            servers["fuse"] = mounted
            for rnd in range(rounds):
                for rw, qd in WORKLOADS:
                    runs["fuse"][(rw, qd)].append(fio(
                        f"{preset}-fuse-{rw}-qd{qd}-{rnd}", mounted.args("fuse", rw, qd), seconds))
            mounted.stop()
            servers.clear()
    finally:
        for s in set(servers.values()):
            try:
                s.stop()
            except Exception:
                pass
    return {f: {w: tuple(statistics.median(x[i] for x in v) for i in range(3))
                for w, v in ws.items()} for f, ws in runs.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="moneta,dram")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2)
    p.add_argument("--no-fuse", action="store_true", help="leave out FUSE + loop (no root)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = p.parse_args()
    for tool in ["fio"] + ([] if a.no_fuse else ["losetup"]):
        if shutil.which(tool) is None:
            die(f"{tool} not found")
    if not os.path.exists(ENGINE):
        die(f"{ENGINE} not found: run scripts/build_native.sh")
    if not a.no_fuse and os.geteuid() != 0:
        die("FUSE + loop needs root (or give --no-fuse)")
    os.makedirs(OUT, exist_ok=True)
    fronts = ["nbd", "channel"] + ([] if a.no_fuse else ["fuse"])
    result = {}
    with tempfile.TemporaryDirectory() as work:
        for preset in a.presets.split(","):
            m = measure(preset, fronts, a.rounds, a.seconds, os.path.join(work))
            model = {rw: model_p50_us(preset, rw) for rw in ("randread", "randwrite")}
            result[preset] = {
                "model_p50_us": model,
                "fronts": {f: {f"{rw}-qd{qd}": {"iops": v[0], "p50_us": v[1], "mb_per_s": v[2],
                                                **({"overhead_us": v[1] - model[rw]} if qd == 1 else {})}
                               for (rw, qd), v in ws.items()} for f, ws in m.items()},
            }
    for preset, r in result.items():
        f = r["fronts"]
        kernel = [k for k in ("nbd", "fuse") if k in f]
        r["ratios"] = {
            f"write_latency_channel_over_{k}": f["channel"]["randwrite-qd1"]["p50_us"] / f[k]["randwrite-qd1"]["p50_us"]
            for k in kernel
        } | {
            f"write_bandwidth_channel_over_{k}": f["channel"]["randwrite-qd16"]["mb_per_s"] / f[k]["randwrite-qd16"]["mb_per_s"]
            for k in kernel
        } | {
            f"read_iops_qd16_channel_over_{k}": f["channel"]["randread-qd16"]["iops"] / f[k]["randread-qd16"]["iops"]
            for k in kernel
        }
    if a.json:
        print(json.dumps(result))
        return
    for preset, r in result.items():
        print(f"\n{preset}: model p50 {r['model_p50_us']['randread']:.2f} us read, "
              f"{r['model_p50_us']['randwrite']:.2f} us write; medians of {a.rounds} rounds of {a.seconds} s")
        print("| front | read QD1 p50 µs (over model) | write QD1 p50 µs (over model) | read QD16 IOPS | write QD16 MB/s |")
        print("|---|---|---|---|---|")
        for front, w in r["fronts"].items():
            print(f"| {front} | {w['randread-qd1']['p50_us']:.2f} (+{w['randread-qd1']['overhead_us']:.2f}) "
                  f"| {w['randwrite-qd1']['p50_us']:.2f} (+{w['randwrite-qd1']['overhead_us']:.2f}) "
                  f"| {w['randread-qd16']['iops']:.0f} | {w['randwrite-qd16']['mb_per_s']:.0f} |")
        for k, v in r["ratios"].items():
            print(f"  {k}: {v:.2f}")
    print("\nMoneta-D (ASPLOS'12): 4 KB write latency 0.40 of the kernel's (60 % lower), bandwidth 7.2x")


if __name__ == "__main__":
    main()
