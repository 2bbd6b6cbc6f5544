#!/usr/bin/env bash
# The project's one test command: installs what is missing, checks formatting and lints,
# then runs every test (unit, property, calibration, CLI end-to-end) in release-like mode, a
# smoke run of every benchmark, the loom models of the lock-free queues, the tag pool and the
# channels' wake-ups, and miri over the rings, the tag pool and the DMA buffer arena.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --release
# The timing model checks its contracts (bookings, address mapping, lockstep, link counts) in
# debug assertions, which the release run above compiles out: its tests run once with them on.
cargo test --locked -p nvarray-model
# The FTL's maps and greedy's buckets are checked against brute force in debug builds too.
cargo test --locked -p nvarray-ftl --test map --test placement --test zones --test map_cache --test bulk

# Every benchmark is built and run once, briefly (NVARRAY_BENCH_SMOKE: short runs, nothing
# timed or asserted), so a bench that breaks fails here instead of rotting unseen.
NVARRAY_BENCH_SMOKE=1 cargo bench --workspace --benches --locked

# loom explores the thread interleavings of the lock-free structures (own target directory:
# `--cfg loom` rebuilds every dependency).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --locked --release \
    -p nvarray-emu --test loom_ring --test loom_word_ring --test loom_nvme_cq --test loom_tag_pool \
    --test loom_mailbox
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --locked --release \
    -p nvarray-channel --test loom_wakeups

# miri checks the unsafe code of the lock-free rings, the tag pool and the DMA buffer arena
# for undefined behaviour (about 2 minutes). The other modules with `unsafe` call into the
# kernel (file mappings, fcntl locks, sockets, FUSE), which miri cannot run. It needs the
# nightly toolchain's miri component, which scripts/setup.sh installs; a missing miri fails
# this command unless NVARRAY_SKIP_MIRI=1 says to skip it.
if cargo +nightly miri --version >/dev/null 2>&1; then
    MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p nvarray-emu --lib -- \
        ring:: word_ring:: nvme_cq:: tag_pool:: arena::
elif [ "${NVARRAY_SKIP_MIRI:-0}" = 1 ]; then
    echo "SKIPPED (not passed, NVARRAY_SKIP_MIRI=1): miri over the rings, tag pool and arena" >&2
else
    echo "test: miri is not installed (rustup +nightly component add miri rust-src); set" \
        "NVARRAY_SKIP_MIRI=1 to skip it knowingly" >&2
    exit 1
fi
