#!/usr/bin/env python3
"""Two nvarray builds must print alike: runs a fixed set of deterministic commands (simulator
runs in every report layout, a sweep with its files and a merge of its shards, presets, a
trace replay, fio job files, and refusals of bad input) with each build and compares stdout,
stderr, the exit status and the files written, leaving out what measures the machine (CPU and
wall-clock figures) or names the build (its build id, and the sweep's identity, `sweep`, a hash made with it).

A change meant to move code, not behaviour (issue 39), must print `0 differ`.

    ./scripts/compare_outputs.py /tmp/nvarray-before target/release/nvarray
"""

import json
import os
import re
import subprocess
import sys
import tempfile

SIM = ["sim", "--preset", "moneta", "--rw", "randrw", "--bs", "4k", "--iodepth", "8",
       "--number_ios", "5000"]
JOB = """[global]
rw=randread
bs=4k
iodepth=4
number_ios=3000
[a]
numjobs=2
[b]
stonewall
rw=write
bs=64k
"""
TRACE = "".join(f"{t},{'R' if i % 3 else 'W'},{(i * 7919 % 4096) * 4096},4096\n"
                for i, t in enumerate(range(0, 400000, 1000)))

# (name, arguments; {dir} is a scratch directory of each build, {job} a job file, {trace} a trace)
CASES = [
    ("sim table", SIM),
    ("sim json", SIM + ["--json"]),
    ("sim fio json", SIM + ["--output-format", "json"]),
    ("sim fio json+", SIM + ["--output-format", "json+"]),
    ("sim fio terse", SIM + ["--output-format", "terse", "--percentile_list", "50:99"]),
    ("bench sim", ["bench", "--engine", "sim", "--preset", "dram", "--rw", "read", "--bs", "64k",
                   "--number_ios", "2000"]),
    ("fio normal", ["fio", "--engine", "sim", "--preset", "optane", "{job}"]),
    ("fio json", ["fio", "--engine", "sim", "--preset", "optane", "--output-format", "json",
                  "{job}"]),
    ("sweep", ["sim", "sweep", "--preset", "pcm", "--rw", "randread", "--number_ios", "2000",
               "--param", "iodepth=1,4", "--param", "bs=4k,16k", "--jobs", "1",
               "--out", "{dir}/s"]),
    ("sweep shard 0", ["sim", "sweep", "--preset", "pcm", "--rw", "randread", "--number_ios",
                       "2000", "--param", "iodepth=1,4", "--param", "bs=4k,16k", "--jobs", "1",
                       "--shard", "0/2", "--out", "{dir}/p0"]),
    ("sweep shard 1", ["sim", "sweep", "--preset", "pcm", "--rw", "randread", "--number_ios",
                       "2000", "--param", "iodepth=1,4", "--param", "bs=4k,16k", "--jobs", "1",
                       "--shard", "1/2", "--out", "{dir}/p1"]),
    ("sweep merge", ["sweep", "merge", "--out", "{dir}/m", "{dir}/p0.jsonl", "{dir}/p1.jsonl"]),
    ("presets", ["presets"]),
    ("presets show", ["presets", "show", "moneta"]),
    ("protocol cost", ["presets", "show", "dc-express-gen3x8", "--protocol-cost"]),
    ("trace", ["sim", "--preset", "moneta", "--trace", "{trace}", "--trace-format", "csv",
               "--replay-mode", "timestamps"]),
    ("bad value", ["sim", "--preset", "moneta", "--iodepth", "0"]),
    ("bad key", ["sim", "--preset", "moneta", "--set", "memory.nope=1"]),
    ("bad preset", ["sim", "--preset", "nope"]),
    ("past the end", ["sim", "--preset", "moneta", "--offset", "1t", "--number_ios", "10"]),
]

MACHINE = re.compile(r"cpu|wall|binary|identity|build|version|elapsed_s\b|seconds|timestamp|^time$|^sweep$")


def machine_free_json(value):
    if isinstance(value, dict):
        return {k: machine_free_json(v) for k, v in value.items() if not MACHINE.search(k)}
    if isinstance(value, list):
        return [machine_free_json(v) for v in value]
    return value


def machine_free_text(text, scratch):
    text = text.replace(scratch, "DIR")
    text = re.sub(r"pid=\d+", "pid=N", text)
    text = re.sub(r"\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4}", "DATE", text)
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") or line.startswith("["):
            try:
                lines.append(json.dumps(machine_free_json(json.loads(line)), sort_keys=True))
                continue
            except ValueError:
                pass
        if re.search(r"cpu|\bin [0-9.]+ ?m?s\b|build id|fio-[0-9]|nvarray [0-9]+\.[0-9]", line,
                     re.I):
            continue
        lines.append(line)
    whole = "\n".join(lines)
    try:
        return json.dumps(machine_free_json(json.loads(text)), sort_keys=True, indent=1)
    except ValueError:
        return whole


def run(binary, scratch, args):
    args = [a.format(dir=scratch, job=os.path.join(scratch, "job.fio"),
                     trace=os.path.join(scratch, "trace.csv")) for a in args]
    r = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
    files = {}
    for name in sorted(os.listdir(scratch)):
        if name in ("job.fio", "trace.csv"):
            continue
        with open(os.path.join(scratch, name), errors="replace") as f:
            files[name] = machine_free_text(f.read(), scratch)
    return (r.returncode, machine_free_text(r.stdout, scratch),
            machine_free_text(r.stderr, scratch), files)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    builds = sys.argv[1:]
    scratches = [tempfile.mkdtemp(prefix="nvarray-compare-") for _ in builds]
    for scratch in scratches:
        with open(os.path.join(scratch, "job.fio"), "w") as f:
            f.write(JOB)
        with open(os.path.join(scratch, "trace.csv"), "w") as f:
            f.write(TRACE)
    differ = 0
    for name, args in CASES:
        before, after = (run(b, s, args) for b, s in zip(builds, scratches))
        parts = ["exit status", "stdout", "stderr", "files"]
        changed = [p for p, x, y in zip(parts, before, after) if x != y]
        if changed:
            differ += 1
            print(f"differs: {name} ({', '.join(changed)})")
            for p, x, y in zip(parts, before, after):
                if x != y and isinstance(x, str):
                    for a, b in zip(x.splitlines(), y.splitlines()):
                        if a != b:
                            print(f"  before: {a[:200]}\n  after:  {b[:200]}")
                            break
        elif before[0] not in (0, 2):
            print(f"note: {name} exits {before[0]} in both: {before[2][:200]}")
    print(f"{len(CASES)} cases, {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
