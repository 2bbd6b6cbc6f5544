#!/usr/bin/env bash
# Counted reliability campaigns (issue 15). Each part is seeded, bounded, and prints the
# command that replays a failure; a passing run appends its counts, seed, commit, date and
# duration to the campaign log in docs/reliability.md. Not part of the test command (which
# runs each of these tests at a small count).
#
#   scripts/campaign.sh nbd-kill  [SEED]   1,000 kill -9 trials of a file-backed serve, 3 writers
#   scripts/campaign.sh nbd-fuzz  [SEED]   10,000,000 requests of the stateful NBD fuzzer
#   scripts/campaign.sh pm-kill   [SEED]   1,000 kill -9 trials of 4 processes sharing a pool
#   scripts/campaign.sh pm-power  [FIRST]  10,000 simulated power cuts (1,250 workloads x 8)
#   scripts/campaign.sh all
#
# Counts can be changed with TRIALS=N (REQUESTS=N for nbd-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

part=${1:-}
seed=${2:-}
log=docs/reliability.md

run() { # name, summary-line prefix, env..., -- cargo args...
    local name=$1 prefix=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local out started
    out=$(mktemp)
    started=$(date +%s)
    echo "campaign $name: ${envs[*]} cargo test --release $*" >&2
    if ! env "${envs[@]}" cargo test --release --locked "$@" -- --nocapture --test-threads=1 \
        >"$out" 2>"$out.err"; then
        grep -E "panicked|replay" "$out" "$out.err" >&2 || tail -30 "$out.err" >&2
        echo "campaign $name: FAILED (full output: $out, $out.err)" >&2
        exit 1
    fi
    local summary
    summary=$(grep -h "^$prefix" "$out" | tail -1)
    echo "$summary"
    printf '| %s | %s | %s | %s | `%s cargo test --release %s` |\n' \
        "$(date -u +%Y-%m-%d)" "$(git rev-parse --short HEAD)" "$name" \
        "${summary#"$prefix": } (wall $(( $(date +%s) - started )) s)" "${envs[*]}" "$*" >>"$log"
    rm -f "$out" "$out.err"
}

nbd_kill() {
    run nbd-kill "nbd kill -9 campaign" NVARRAY_KILL_TRIALS="${TRIALS:-1000}" \
        NVARRAY_KILL_SEED="${seed:-7020945324}" -- -p nvarray --test nbd \
        acknowledged_writes_survive_kill_9_at_random
}
nbd_fuzz() {
    run nbd-fuzz "stateful fuzz" NVARRAY_FUZZ_REQUESTS="${REQUESTS:-10000000}" \
        NVARRAY_FUZZ_SEED="${seed:-1851941990}" -- -p nvarray-nbd --test stateful_fuzz
}
pm_kill() {
    run pm-kill "pm kill -9 campaign" NVARRAY_PM_KILL_TRIALS="${TRIALS:-1000}" \
        NVARRAY_PM_KILL_WORKERS=4 NVARRAY_PM_KILL_SEED="${seed:-7632751}" -- -p nvarray-pm \
        --test kill workers_share
}
pm_power() {
    run pm-power "pm power-cut campaign" NVARRAY_PM_POWER_SEEDS="$(( ${TRIALS:-10000} / 8 ))" \
        NVARRAY_PM_POWER_FIRST_SEED="${seed:-1000}" -- -p nvarray-pm --test crash \
        recovery_after_a_power_cut
}

case "$part" in
    nbd-kill) nbd_kill ;;
    nbd-fuzz) nbd_fuzz ;;
    pm-kill) pm_kill ;;
    pm-power) pm_power ;;
    all) nbd_kill; pm_kill; pm_power; nbd_fuzz ;;
    *)
        sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
