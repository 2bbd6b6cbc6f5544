#!/usr/bin/env bash
# Counted reliability campaigns (issue 15). Each part is seeded, bounded, and prints the
# command that replays a failure; a passing run appends its counts, seed, commit, date and
# duration to the campaign log in docs/reliability.md. Not part of the test command (which
# runs each of these tests at a small count).
#
#   scripts/campaign.sh nbd-kill  [SEED]   1,000 kill -9 trials of a file-backed serve, 3 writers
#   scripts/campaign.sh nbd-fuzz  [SEED]   10,000,000 requests of the stateful NBD fuzzer
#   scripts/campaign.sh nbd-faults [SEED]  1,000,000 requests of that fuzzer on a file backing
#                                          whose reads, writes, msyncs and fsyncs fail 1 in 20
#   scripts/campaign.sh faults    [SEED]   the same faults under channels and the FUSE mount
#                                          (150,000 requests each) and 12,000 bench --verify runs
#                                          (or one of them: faults-channels, faults-fuse, faults-bench)
#   scripts/campaign.sh pm-faults [SEED]   the pool's fdatasyncs and fallocates failing 1 in 4 (Rust
#                                          API, 80,000 steps) and 1 in 3 (C ABI 60,000 steps,
#                                          SQLite VFS 80,000 steps): >= 10,000 faults each
#                                          (or one: pm-faults-rust, pm-faults-c-abi, pm-faults-sqlite)
#   scripts/campaign.sh channel-sim [FIRST] 1,000,000 seeds of the channel daemon's deterministic
#                                          simulation, 200 steps each (TRIALS=N seeds)
#   scripts/campaign.sh nbd-sim   [FIRST]  1,000,000 seeds of the NBD server's deterministic
#                                          simulation, 200 steps each (TRIALS=N seeds)
#   scripts/campaign.sh pm-kill   [SEED]   1,000 kill -9 trials of 4 processes sharing a pool (C ABI)
#   scripts/campaign.sh pm-power  [FIRST]  10,000 simulated power cuts (1,250 workloads x 8)
#   scripts/campaign.sh pm-sqlite-kill [SEED] 1,000 kill -9 trials of a SQLite writer on the VFS
#   scripts/campaign.sh pm-sqlite-power [FIRST] 10,000 simulated power cuts under SQLite (1,250 x 8)
#   scripts/campaign.sh pm-sqlite-pools [SEED] 10,000 steps of SQLite on pools of random sizes:
#                                          fills in every journal mode, kill -9, power cuts,
#                                          renames, hard links and copies of the pool files
#   scripts/campaign.sh fuse-kill [SEED]   300 kill -9 trials of mount under XFS + SQLite
#   scripts/campaign.sh fuzz               every cargo fuzz target in fuzz/, 300 s each
#   scripts/campaign.sh soak               30 min of verified fio through NBD and FUSE at once,
#                                          memory and descriptors sampled every minute (docs/soak.md)
#   scripts/campaign.sh all
#
# Counts can be changed with TRIALS=N (REQUESTS=N for nbd-fuzz, nbd-faults and faults, SECONDS_PER_TARGET=N for fuzz,
# MINUTES=N for soak).
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
    # (libtest prints the test's name and then its output on the same line.)
    summary=$(grep -ho "$prefix.*" "$out" | tail -1 || true)
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
        NVARRAY_FUZZ_SEED="${seed:-1851941990}" -- -p nvarray-nbd --test stateful_fuzz \
        the_server_survives
}
nbd_faults() {
    run nbd-faults "nbd backing faults" NVARRAY_FAULTS_REQUESTS="${REQUESTS:-1000000}" \
        NVARRAY_FAULTS_SEED="${seed:-2712}" -- -p nvarray-nbd --test stateful_fuzz backing_faults
}
faults() { faults_channels; faults_fuse; faults_bench; }
faults_channels() {
    run faults-channels "channels backing faults" NVARRAY_FAULTS_STEPS="${REQUESTS:-150000}" \
        NVARRAY_FAULTS_SEED="${seed:-3141}" -- -p nvarray --test backing_faults channels
}
faults_fuse() {
    run faults-fuse "fuse_mount backing faults" NVARRAY_FAULTS_STEPS="${REQUESTS:-150000}" \
        NVARRAY_FAULTS_SEED="${seed:-5926}" -- -p nvarray --test backing_faults fuse_mount
}
faults_bench() {
    run faults-bench-verify "bench_verify backing faults" NVARRAY_FAULTS_RUNS="${TRIALS:-12000}" \
        NVARRAY_FAULTS_SEED="${seed:-5358}" -- -p nvarray --test backing_faults bench_verify
}
channel_sim() {
    run channel-sim "channel simulation" NVARRAY_SIM_SEEDS="${TRIALS:-1000000}" \
        NVARRAY_SIM_FIRST_SEED="${seed:-1}" NVARRAY_SIM_STEPS=200 -- -p nvarray-channel \
        --test simulation
}
nbd_sim() {
    run nbd-sim "nbd simulation" NVARRAY_SIM_SEEDS="${TRIALS:-1000000}" \
        NVARRAY_SIM_FIRST_SEED="${seed:-1}" NVARRAY_SIM_STEPS=200 -- -p nvarray-nbd \
        --test simulation
}
pm_faults() { pm_faults_rust; pm_faults_c_abi; pm_faults_sqlite; }
pm_faults_rust() {
    run pm-faults-rust "pm faults" NVARRAY_PM_FAULTS_STEPS="${TRIALS:-80000}" \
        NVARRAY_PM_FAULTS_SEED="${seed:-8161}" -- -p nvarray-pm --test faults random
}
pm_faults_c_abi() {
    run pm-faults-c-abi "c abi faults" NVARRAY_PM_C_FAULTS_STEPS="${TRIALS:-60000}" \
        NVARRAY_PM_C_FAULTS_SEED="${seed:-8162}" -- -p nvarray-pm --test c_abi faults
}
pm_faults_sqlite() {
    run pm-faults-sqlite "sqlite faults" NVARRAY_SQLITE_FAULTS_STEPS="${TRIALS:-80000}" \
        NVARRAY_SQLITE_FAULTS_SEED="${seed:-8163}" -- -p nvarray-pm --test sqlite_vfs faults
}
pm_kill() {
    run pm-kill "pm kill -9 campaign" NVARRAY_PM_KILL_TRIALS="${TRIALS:-1000}" \
        NVARRAY_PM_KILL_WORKERS=4 NVARRAY_PM_KILL_ABI=c NVARRAY_PM_KILL_SEED="${seed:-7632751}" -- -p nvarray-pm \
        --test kill workers_share
}
pm_power() {
    run pm-power "pm power-cut campaign" NVARRAY_PM_POWER_SEEDS="$(( ${TRIALS:-10000} / 8 ))" \
        NVARRAY_PM_POWER_FIRST_SEED="${seed:-1000}" -- -p nvarray-pm --test crash \
        recovery_after_a_power_cut
}

pm_sqlite_kill() {
    run pm-sqlite-kill "sqlite kill campaign" NVARRAY_SQLITE_KILL_TRIALS="${TRIALS:-1000}" \
        NVARRAY_SQLITE_KILL_SEED="${seed:-1366649961}" -- -p nvarray-pm --test sqlite_vfs \
        killed
}

pm_sqlite_power() {
    run pm-sqlite-power "sqlite power-cut campaign" \
        NVARRAY_SQLITE_POWER_SEEDS="$(( ${TRIALS:-10000} / 8 ))" \
        NVARRAY_SQLITE_POWER_FIRST_SEED="${seed:-1000}" -- -p nvarray-pm --test sqlite_vfs \
        power_cuts_under_sqlite
}

pm_sqlite_pools() {
    run pm-sqlite-pools "sqlite pools campaign" NVARRAY_SQLITE_POOLS_STEPS="${TRIALS:-10000}" \
        NVARRAY_SQLITE_POOLS_FIRST_SEED="${seed:-5501}" -- -p nvarray-pm --test sqlite_vfs \
        pools_campaign
}

fuse_kill() {
    run fuse-kill "fuse kill -9 campaign" NVARRAY_FUSE_KILL_TRIALS="${TRIALS:-300}" \
        NVARRAY_FUSE_KILL_SEED="${seed:-1718973285}" -- -p nvarray --test fuse \
        sqlite_on_xfs_survives_kill_9
}

soak() {
    local minutes=${MINUTES:-30} d bin
    bin=$PWD/target/release/nvarray
    cargo build --release --locked -p nvarray
    d=$(mktemp -d /tmp/nvarray-soak.XXXXXX)
    mkdir "$d/mnt"
    "$bin" serve --preset dram --size 256M --listen "unix:$d/nbd.sock" >"$d/serve.log" 2>&1 &
    local serve=$!
    "$bin" mount "$d/mnt" --preset dram --size 256M >"$d/mount.log" 2>&1 &
    local mount=$!
    # shellcheck disable=SC2064
    trap "kill -INT $serve $mount 2>/dev/null || true; sleep 3; fusermount3 -u -z $d/mnt 2>/dev/null || true; rm -rf $d" EXIT
    until [ -S "$d/nbd.sock" ] && [ -e "$d/mnt/disk" ]; do sleep 0.2; done
    local end=$(( $(date +%s) + minutes * 60 ))
    # Verified I/O, pass after pass, until the end: every block written is read back and
    # checked (crc32c); a mismatch stops fio with an error and fails the soak.
    verified() { # name, fio args...
        local name=$1 passes=0
        shift
        while [ "$(date +%s)" -lt "$end" ]; do
            (cd "$d" && fio --name="$name" "$@" --rw=randrw --bs=4k --size=64M --iodepth=16 \
                --verify=crc32c --do_verify=1 --verify_fatal=1 --output="$d/$name.out") \
                || { echo "soak: fio $name failed a verify pass:" >&2; cat "$d/$name.out" >&2; return 1; }
            passes=$((passes + 1))
            echo "$passes" >"$d/$name.passes"
        done
    }
    verified nbd --ioengine=nbd --uri="nbd+unix:///nvarray?socket=$d/nbd.sock" --numjobs=2 \
        --offset_increment=64M &
    local fio_nbd=$!
    verified fuse --ioengine=psync --filename="$d/mnt/disk" --numjobs=2 --offset_increment=64M &
    local fio_fuse=$!
    sample() { # pid -> "rss_kB fds"
        echo "$(awk '/VmRSS/ {print $2}' /proc/"$1"/status) $(ls /proc/"$1"/fd | wc -l)"
    }
    {
        echo "# Soak: $minutes min of verified fio through NBD and FUSE at once"
        echo
        echo "\`scripts/campaign.sh soak\`, commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d)." \
            "Two fio jobs (randrw 4 KiB, QD 16, crc32c verify) on \`nvarray serve\` and two on" \
            "\`nvarray mount\`'s file, pass after pass; resident memory and open descriptors of" \
            "each server every minute."
        echo
        echo "| Minute | serve RSS (kB) | serve fds | mount RSS (kB) | mount fds | fio passes NBD / FUSE |"
        echo "|---|---|---|---|---|---|"
    } >docs/soak.md
    local m=0 first_rss="" last_rss=""
    while [ "$(date +%s)" -lt "$end" ]; do
        sleep 60
        m=$((m + 1))
        kill -0 "$serve" 2>/dev/null || { echo "soak: serve died" >&2; exit 1; }
        kill -0 "$mount" 2>/dev/null || { echo "soak: mount died" >&2; exit 1; }
        read -r s_rss s_fd <<<"$(sample "$serve")"
        read -r m_rss m_fd <<<"$(sample "$mount")"
        echo "| $m | $s_rss | $s_fd | $m_rss | $m_fd | $(cat "$d/nbd.passes" 2>/dev/null || echo 0) / $(cat "$d/fuse.passes" 2>/dev/null || echo 0) |" \
            | tee -a docs/soak.md
        [ "$m" = 2 ] && first_rss=$((s_rss + m_rss))
        last_rss=$((s_rss + m_rss))
    done
    wait "$fio_nbd" || exit 1
    wait "$fio_fuse" || exit 1
    local growth="n/a"
    [ -n "$first_rss" ] && growth="$(( (last_rss - first_rss) * 100 / first_rss )) %"
    printf '| %s | %s | soak | %s min, fio verify passes NBD %s / FUSE %s, 0 verify errors; RSS (serve + mount) minute 2 to end: %s (docs/soak.md) | `scripts/campaign.sh soak` |\n' \
        "$(date -u +%Y-%m-%d)" "$(git rev-parse --short HEAD)" "$minutes" \
        "$(cat "$d/nbd.passes")" "$(cat "$d/fuse.passes")" "$growth" >>"$log"
}

fuzz() {
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    local seconds=${SECONDS_PER_TARGET:-300} target out runs
    for target in $(cd fuzz && cargo +nightly fuzz list); do
        out=$(mktemp)
        echo "campaign fuzz: $target for $seconds s" >&2
        if ! (cd fuzz && cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" \
            -print_final_stats=1) >"$out" 2>&1; then
            grep -E "panicked|ERROR|Test unit written" "$out" >&2 || tail -30 "$out" >&2
            echo "campaign fuzz: $target FAILED (the crashing input is under fuzz/artifacts/$target;" \
                "replay: cd fuzz && cargo +nightly fuzz run $target ARTIFACT; output: $out)" >&2
            exit 1
        fi
        runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$out" | grep -oE "[0-9]+$" | tail -1)
        echo "fuzz $target: $runs runs in $seconds s, 0 crashes"
        printf '| %s | %s | fuzz %s | %s runs in %s s, 0 crashes | `cd fuzz && cargo +nightly fuzz run %s -- -max_total_time=%s` |\n' \
            "$(date -u +%Y-%m-%d)" "$(git rev-parse --short HEAD)" "$target" "$runs" "$seconds" \
            "$target" "$seconds" >>"$log"
        rm -f "$out"
    done
}

case "$part" in
    nbd-kill) nbd_kill ;;
    nbd-fuzz) nbd_fuzz ;;
    nbd-faults) nbd_faults ;;
    faults) faults ;;
    pm-faults) pm_faults ;;
    channel-sim) channel_sim ;;
    nbd-sim) nbd_sim ;;
    pm-faults-rust) pm_faults_rust ;;
    pm-faults-c-abi) pm_faults_c_abi ;;
    pm-faults-sqlite) pm_faults_sqlite ;;
    faults-channels) faults_channels ;;
    faults-fuse) faults_fuse ;;
    faults-bench) faults_bench ;;
    pm-kill) pm_kill ;;
    pm-power) pm_power ;;
    pm-sqlite-kill) pm_sqlite_kill ;;
    pm-sqlite-power) pm_sqlite_power ;;
    pm-sqlite-pools) pm_sqlite_pools ;;
    fuse-kill) fuse_kill ;;
    fuzz) fuzz ;;
    soak) soak ;;
    all) nbd_kill; pm_kill; pm_power; pm_sqlite_kill; pm_sqlite_power; pm_sqlite_pools; nbd_fuzz; nbd_faults; faults; pm_faults; channel_sim; nbd_sim; fuse_kill; fuzz; soak ;;
    *)
        sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
