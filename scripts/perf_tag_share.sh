#!/usr/bin/env bash
# Issue 15's measurement of the NBD tag shares: two `nvarray serve` binaries side by side,
# alternating in each round on the same machine (OLD: before the shares, NEW: with them).
#   1. Cost: one client, fio's nbd engine, 4 KiB random reads at QD 16 (IOPS).
#   2. Fairness: a client at QD 64 and one at QD 1 at once on a device with 64 tags and
#      10 us memory (so commands stay in flight); the QD 1 client's p50 and p99 latency.
# Prints one line per run and the medians.
#
#   scripts/perf_tag_share.sh OLD_BINARY NEW_BINARY [ROUNDS] [SECONDS]
set -euo pipefail
old=${1:?old nvarray binary}
new=${2:?new nvarray binary}
rounds=${3:-5}
seconds=${4:-5}
dir=$(mktemp -d /tmp/nvarray-share.XXXXXX)
trap 'rm -rf "$dir"' EXIT

serve() { # binary, extra args... ; prints pid once listening
    local bin=$1
    shift
    rm -f "$dir/s.sock"
    "$bin" serve --preset dram --size 1G --listen "unix:$dir/s.sock" "$@" >"$dir/serve.log" 2>&1 &
    local pid=$!
    until grep -q "listening on" "$dir/serve.log" 2>/dev/null; do sleep 0.05; done
    echo "$pid"
}

fio_json() { # job args...
    fio --output-format=json --ioengine=nbd --uri="nbd+unix:///nvarray?socket=$dir/s.sock" \
        --time_based --runtime="$seconds" --size=1G --bs=4k "$@"
}

cost() { # binary -> IOPS at QD 16
    local pid
    pid=$(serve "$1")
    fio_json --name=qd16 --rw=randread --iodepth=16 \
        | python3 -c 'import json,sys; s=sys.stdin.read(); print(round(json.loads(s[s.index("{"):])["jobs"][0]["read"]["iops"]))'
    kill -INT "$pid"
    wait "$pid" 2>/dev/null || true
}

fair() { # binary -> "p50_us p99_us" of the QD 1 client beside a QD 64 one
    local pid
    pid=$(serve "$1" --set controller.tags=64 --set memory.latency_ns=10us)
    fio_json --name=greedy --rw=randread --iodepth=64 --name=qd1 --rw=randread --iodepth=1 \
        | python3 -c '
import json, sys
s = sys.stdin.read()  # the nbd engine prints a line before the JSON
job = [j for j in json.loads(s[s.index("{"):])["jobs"] if j["jobname"] == "qd1"][0]
p = job["read"]["clat_ns"]["percentile"]
print(round(p["50.000000"] / 1000, 1), round(p["99.000000"] / 1000, 1))'
    kill -INT "$pid"
    wait "$pid" 2>/dev/null || true
}

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

for r in $(seq "$rounds"); do
    for which in old new; do
        bin=$old
        [ "$which" = new ] && bin=$new
        c=$(cost "$bin")
        f=$(fair "$bin")
        echo "round $r $which: QD16 IOPS $c; QD1 beside QD64: p50 / p99 us $f"
        echo "$c" >>"$dir/$which.cost"
        echo "$f" | cut -d' ' -f1 >>"$dir/$which.p50"
        echo "$f" | cut -d' ' -f2 >>"$dir/$which.p99"
    done
done
for which in old new; do
    echo "median $which: QD16 IOPS $(median <"$dir/$which.cost"); QD1 beside QD64:" \
        "p50 $(median <"$dir/$which.p50") us, p99 $(median <"$dir/$which.p99") us"
done
