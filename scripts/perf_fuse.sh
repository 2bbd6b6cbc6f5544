#!/usr/bin/env bash
# Issue 4's FUSE benchmark: fio psync 4 KiB random reads, QD 1, on a loop device over
# `nvarray mount`'s file (dram preset, RAM backing), next to the same fio on a loop device over
# a plain /dev/shm file of the same size. Both loop modes are measured: buffered (losetup's
# default, what the README shows) and --direct-io=on (as in perf_emulator.py's kernel
# section). Rounds alternate between the two paths so that both see the same machine; the
# table gives the median round. Raw fio JSON and the server's device reports go to $OUT.
#
#     sudo ./scripts/perf_fuse.sh                       # 3 rounds of 10 s per path and mode
#     sudo ROUNDS=5 RUNTIME=5 ./scripts/perf_fuse.sh
#
# Needs root (mount, losetup), fio, fuse3 and a release build (cargo build --release -p nvarray).
set -euo pipefail
cd "$(dirname "$0")/.."

NVARRAY=${NVARRAY:-target/release/nvarray}
SIZE=${SIZE:-1G}
RUNTIME=${RUNTIME:-10}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-target/perf-fuse}

die() { echo "perf_fuse.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root for mount and losetup (run with sudo)"
command -v fio >/dev/null || die "fio not found (Debian: apt-get install fio)"
command -v fusermount3 >/dev/null || die "fusermount3 not found (Debian: apt-get install fuse3)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"
[ -x "$NVARRAY" ] || die "$NVARRAY not found: cargo build --release -p nvarray"

mkdir -p "$OUT"
work=$(mktemp -d)
shm=/dev/shm/nvarray-perf-fuse.img
server=""
loops=()
cleanup() {
    for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
        kill -INT "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    grep -q " $work/fuse " /proc/mounts && fusermount3 -u -z "$work/fuse"
    rm -rf "$work" "$shm"
}
trap cleanup EXIT

echo "commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(nproc) cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/machine.txt"

# The plain file: written once, so every page exists (a hole would read as a shared zero page).
truncate -s "$SIZE" "$shm"
dd if=/dev/zero of="$shm" bs=1M count=$(( $(stat -c %s "$shm") / 1048576 )) conv=notrunc status=none

# The emulated device: RAM backing (prefaulted at open), dram preset, default driver options.
mkdir "$work/fuse"
"$NVARRAY" mount "$work/fuse" --preset dram --size "$SIZE" --json >"$OUT/server.json" 2>"$OUT/server.err" &
server=$!
for _ in $(seq 300); do
    grep -q " $work/fuse fuse" /proc/mounts && break
    kill -0 "$server" 2>/dev/null || die "nvarray mount failed: $(cat "$OUT/server.err")"
    sleep 0.05
done
grep -q " $work/fuse fuse" /proc/mounts || die "nvarray mount did not mount in 15 s"

fio_run() { # name loop-device
    fio --name="$1" --filename="$2" --ioengine=psync --rw=randread --bs=4k --iodepth=1 \
        --direct=1 --time_based --runtime="$RUNTIME" --output-format=json >"$OUT/$1.json"
}

for mode in off on; do
    lshm=$(losetup --find --show --direct-io="$mode" "$shm"); loops+=("$lshm")
    lfuse=$(losetup --find --show --direct-io="$mode" "$work/fuse/disk"); loops+=("$lfuse")
    for round in $(seq "$ROUNDS"); do
        fio_run "shm-dio$mode-$round" "$lshm"
        fio_run "fuse-dio$mode-$round" "$lfuse"
    done
    losetup -d "$lshm" "$lfuse"
    loops=()
done

echo "load average after the runs $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

# Stop the server (nothing uses its file any more) so that it writes its device report.
kill -INT "$server"
wait "$server"
server=""

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])

def load(name):
    read = json.load(open(f"{out}/{name}.json"))["jobs"][0]["read"]
    return read["iops"], read["clat_ns"]["percentile"]["50.000000"], read["clat_ns"]["percentile"]["99.000000"]

print("| loop mode | path | IOPS | p50 µs | p99 µs | IOPS of each round |")
print("|---|---|---|---|---|---|")
for mode in ["off", "on"]:
    med = {}
    for path in ["shm", "fuse"]:
        runs = [load(f"{path}-dio{mode}-{r}") for r in range(1, rounds + 1)]
        iops = statistics.median(r[0] for r in runs)
        p50 = statistics.median(r[1] for r in runs) / 1e3
        p99 = statistics.median(r[2] for r in runs) / 1e3
        med[path] = (iops, p50, p99)
        label = "plain /dev/shm file" if path == "shm" else "nvarray mount file (dram)"
        each = " ".join(f"{r[0]:.0f}" for r in runs)
        print(f"| direct-io={mode} | {label} | {iops:,.0f} | {p50:.2f} | {p99:.2f} | {each} |")
    (si, s50, s99), (fi, f50, f99) = med["shm"], med["fuse"]
    print(f"| direct-io={mode} | FUSE cost | {fi / si:.2f}× the IOPS | +{f50 - s50:.2f} | +{f99 - s99:.2f} | |")

report = json.load(open(f"{out}/server.json"))
l = report["lateness_ns"]
print(f"\nserver: {report['requests']} requests, device p50 {report['latency_ns']['p50'] / 1e3:.2f} µs "
      f"(FUSE request in to answer out), lateness p99 {l['p99'] / 1e3:.2f} µs, faithful {report['faithful']}")
PY
