#!/usr/bin/env python3
"""Two nvarray builds must simulate alike: runs `nvarray sim --json` with each build on every
preset below under three workloads and compares the reports, leaving out what measures this
machine (CPU and wall-clock figures). A change meant to make the model or the simulator faster,
not different, must print `0 differ` (issue 38).

    ./scripts/compare_sim_json.py /tmp/nvarray-before target/release/nvarray
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


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = sys.argv[1:]
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
