#!/bin/bash
# Instructions per command, counted by callgrind: a run of N and of 2N commands, differenced, so
# set-up and tear-down cancel. The stable figure on a shared VM, where times drift (issue 38).
#
#   scripts/callgrind_per_command.sh model BINARY CASE      # model_cost's cases whose names hold CASE: dram, 'moneta 4', 'moneta 512'
#   scripts/callgrind_per_command.sh sim BINARY PRESET BS IODEPTH   # a whole simulated request
#   scripts/callgrind_per_command.sh bench BINARY PRESET BS IODEPTH # an emulated request, inline:
#       host thread, driver, device and model on one thread (`--device-threads 0`)
#
# BINARY is target/release/deps/model_cost-* (cargo bench -p nvarray-model --bench model_cost
# --no-run prints it) or target/release/nvarray. Needs valgrind.
#
# `bench` counts carry the pause watch's work under valgrind's slowdown (about 50x: every gap
# between two clock readings passes `pauses::PAUSE_NS`, so every reading is a pause and every
# completion is looked up among them): about 550 instructions a request of `null` 512 B, QD 32
# or 1 (issue 57: 3,100 -> 2,548 and 4,246 -> 3,717 with PAUSE_NS at 2 s in a build of abb253b).
# The counts vary by about 50 from run to run for the same reason; compare builds in one sitting.
set -euo pipefail
kind=${1:?model or sim}; bin=${2:?binary}; shift 2
n=100000
count() {
    local out; out=$(mktemp)
    case $kind in
        model) valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" 1 "$case" \
                   >/dev/null 2>"$out" ;;
        sim) valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" sim --preset "$preset" \
                 --rw randread --bs "$bs" --iodepth "$qd" --number_ios "$1" >/dev/null 2>"$out" ;;
        bench) valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" bench --preset "$preset" \
                   --size 16m --rw randread --bs "$bs" --iodepth "$qd" --device-threads 0 \
                   --number_ios "$1" >/dev/null 2>"$out" ;;
    esac
    grep -ao 'refs: *[0-9,]*' "$out" | tr -d ', ' | cut -d: -f2
    rm -f "$out"
}
case $kind in
    model) case=${1:?case}; what="model_cost $case" ;;
    sim|bench) preset=${1:?preset}; bs=${2:?bs}; qd=${3:?iodepth}; what="$kind $preset $bs QD $qd" ;;
    *) echo "first argument: model, sim or bench" >&2; exit 2 ;;
esac
a=$(count $n); b=$(count $((2 * n)))
echo "$what: $(( (b - a) / n )) instructions per command"
