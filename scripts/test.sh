#!/usr/bin/env bash
# The project's one test command: installs what is missing, checks formatting and lints,
# then runs every test (unit, property, calibration, CLI end-to-end) in release-like mode.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --release
