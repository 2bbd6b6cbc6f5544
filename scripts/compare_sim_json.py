#!/usr/bin/env python3
"""Two nvarray builds must simulate alike: runs `nvarray sim --json` with each build on every
preset below under three workloads and compares the reports, leaving out what measures this
machine (CPU and wall-clock figures). A change meant to make the model or the simulator faster,
not different, must print `0 differ` (issue 38).

    ./scripts/compare_sim_json.py /tmp/nvarray-before target/release/nvarray
    ./scripts/compare_sim_json.py --table /tmp/nvarray-before target/release/nvarray

A deliberate change of meaning lists the figures it moves in its commit: `--table` prints IOPS,
p50 and p99 of every case before and after as a Markdown table (100,000 requests a case).
"""

import json
import subprocess
import sys

PRESETS = ["moneta", "dram", "pcm", "optane", "tlc", "z-nand", "hdd", "dc-express-gen3x8",
           "openexpress", "remote-pcm", "null"]
WORKLOADS = [
    ["--rw", "randread", "--bs", "4k", "--iodepth", "16"],
    ["--rw", "randrw", "--bs", "64k", "--iodepth", "8"],
    ["--rw", "randwrite", "--bs", "512", "--iodepth", "32"],
]
REQUESTS = "20000"


def machine_free(report):
    """The report without the figures that measure this machine rather than the model."""
    if isinstance(report, dict):
        return {k: machine_free(v) for k, v in report.items()
                if "cpu" not in k and "wall" not in k}
    if isinstance(report, list):
        return [machine_free(x) for x in report]
    return report


def simulate(binary, args):
    run = subprocess.run([binary, "sim", *args, "--json"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{binary} sim {' '.join(args)} failed: {run.stderr.strip()}")
    return machine_free(json.loads(run.stdout))


def table(before, after):
    """The figures each case moves, as a Markdown table, and the largest change of IOPS."""
    print("| preset | workload | IOPS before | after | ratio | p50 ns before | after "
          "| p99 ns before | after |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for preset in PRESETS:
        for w in WORKLOADS:
            args = ["--preset", preset, *w, "--number_ios", "100000"]
            a, b = simulate(before, args), simulate(after, args)
            ratio = b["iops"] / a["iops"] if a["iops"] else 1.0
            worst = max(worst, abs(ratio - 1))
            la, lb = a["latency_ns"], b["latency_ns"]
            print(f"| {preset} | {w[1]} {w[3]} QD {w[5]} | {a['iops']:,.0f} | {b['iops']:,.0f} "
                  f"| {ratio:.4f} | {la['p50']:,} | {lb['p50']:,} | {la['p99']:,} | {lb['p99']:,} |")
    print(f"\nlargest change of IOPS: {worst * 100:.2f} %")


def main():
    args = sys.argv[1:]
    if args[:1] == ["--table"] and len(args) == 3:
        table(*args[1:])
        return
    if len(args) != 2:
        sys.exit(__doc__)
    before, after = args
    cases = [["--preset", p, *w, "--number_ios", REQUESTS] for p in PRESETS for w in WORKLOADS]
    differ = 0
    for args in cases:
        if simulate(before, args) != simulate(after, args):
            differ += 1
            print("differs:", " ".join(args))
    print(f"{len(cases)} cases, {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
