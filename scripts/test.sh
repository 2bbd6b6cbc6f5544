#!/usr/bin/env bash
# The project's one test command: installs what is missing, checks formatting and lints,
# then runs every test (unit, property, calibration, CLI end-to-end) in release-like mode, a
# smoke run of every benchmark,
# the loom models of the lock-free queues and tag pool, and miri over the queue modules.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --release

# Every benchmark is built and run once, briefly (NVARRAY_BENCH_SMOKE: short runs, nothing
# timed or asserted), so a bench that breaks fails here instead of rotting unseen.
NVARRAY_BENCH_SMOKE=1 cargo bench --workspace --benches --locked

# loom explores the thread interleavings of the lock-free structures (own target directory:
# `--cfg loom` rebuilds every dependency).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --locked --release \
    -p nvarray-emu --test loom_ring --test loom_word_ring --test loom_nvme_cq --test loom_tag_pool

# miri checks the unsafe code of the rings for undefined behaviour. It needs the nightly
# toolchain with the miri component; without it this step says so and is not counted as run.
if cargo +nightly miri --version >/dev/null 2>&1; then
    MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p nvarray-emu --lib -- \
        ring:: word_ring:: nvme_cq::
else
    echo "SKIPPED (not passed): miri over the rings; install with: rustup +nightly component add miri" >&2
fi
