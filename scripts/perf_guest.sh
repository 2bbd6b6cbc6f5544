#!/usr/bin/env bash
# The verdict of a guest's session on the vhost-user-blk back end (issue 59): a TCG guest runs
# scripts/guest.py's `verify` job (fio write+verify, re-read, dd O_DIRECT) on `nvarray serve
# --vhost-user-blk`, and the server's report at exit says whether the device kept its model's
# time. One markdown row per boot: backing, guest vCPUs, verdict, p99 lateness, the emulator's
# own p99 and the share of completions that fell due while the serving thread ran its own code.
#
#   scripts/perf_guest.sh [RUNS] [PRESET]     (defaults: 3 moneta; needs scripts/guest.py prepare)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
preset=${2:-moneta}
nvarray=${NVARRAY:-target/release/nvarray}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "| backing | vCPUs | verdict | p99 lateness µs | own p99 µs | fell due in own code |"
echo "|---|---|---|---|---|---|"
for backing in ram file; do
    for smp in 1 2; do
        for _ in $(seq "$runs"); do
            rm -f "$dir/v.sock" "$dir/disk.img"
            b=ram
            [ "$backing" = file ] && b="file:$dir/disk.img"
            "$nvarray" serve --preset "$preset" --size 256m --backing "$b" --vhost-queues 2 \
                --vhost-user-blk "unix:$dir/v.sock" >"$dir/serve.log" 2>&1 &
            pid=$!
            for _ in $(seq 100); do [ -S "$dir/v.sock" ] && break; sleep 0.1; done
            python3 scripts/guest.py run --vhost-user-blk "$dir/v.sock" --num-queues 2 \
                --smp "$smp" --job verify >"$dir/guest.json" || { cat "$dir/guest.json"; exit 1; }
            kill -TERM "$pid"
            wait "$pid"
            verdict=$(grep -oE '^(faithful|machine-limited|NOT FAITHFUL)' "$dir/serve.log" | tail -1)
            p99=$(grep -oE 'lateness, µs after the modelled completion time: p50 [0-9.]+ \| p99 [0-9.]+' \
                "$dir/serve.log" | tail -1 | grep -oE '[0-9.]+$')
            own=$(grep -oE "emulator's own, without .*p99 [0-9.]+" "$dir/serve.log" | tail -1 | grep -oE '[0-9.]+$' || true)
            share=$(grep -oE '\(([0-9.]+ %)\) fell due while the host thread' "$dir/serve.log" | tail -1 \
                | grep -oE '[0-9.]+ %' || true)
            echo "| $backing | $smp | $verdict | $p99 | ${own:-${p99}} | ${share:-0 %} |"
        done
    done
done
