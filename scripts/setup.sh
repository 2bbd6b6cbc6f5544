#!/usr/bin/env bash
# Installs what nvarray's build and tests need on a fresh Debian machine (run as root), then
# builds the release binary. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: plotters renders text through fontconfig/freetype.
need=()
# gcc builds the C example of nvarray-pm (its tests) and the PMDK peer; libpmemobj-dev is
# PMDK, the peer of scripts/perf_pm.py.
# The front ends are tested with the real clients users point at them: fio (engine nbd),
# nbdinfo/nbdcopy (libnbd-bin), nbdsh (python3-libnbd), qemu-io/qemu-img (qemu-utils), nbdkit
# as the peer server, and FUSE 3 + a loop device + XFS + SQLite for `nvarray mount` (and
# libsqlite3-dev for the SQLite VFS over nvarray-pm, native/sqlite-vfs); PostgreSQL
# and Berkeley DB (python3-bsddb3) for the application study (`nvarray repro apps`); Slurm and
# munge for the job-array sweep script's test (scripts/slurm-sweep.sh, a one-node cluster).
for pkg in pkg-config libfontconfig1-dev libfreetype-dev fonts-dejavu-core gcc libpmemobj-dev \
    fio libnbd-bin python3-libnbd qemu-utils nbdkit fuse3 xfsprogs e2fsprogs sqlite3 libsqlite3-dev util-linux \
    postgresql python3-bsddb3 slurmctld slurmd slurm-client munge; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust stable (rustup)" >&2; exit 1; }
# miri (undefined-behaviour checks of the unsafe code, run by scripts/test.sh) comes with the
# nightly toolchain. Installed when rustup is here and NVARRAY_SKIP_MIRI is not set.
if [ "${NVARRAY_SKIP_MIRI:-0}" != 1 ] && command -v rustup >/dev/null \
    && ! cargo +nightly miri --version >/dev/null 2>&1; then
  echo "setup: installing the nightly toolchain's miri component"
  rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null
  cargo +nightly miri setup >/dev/null
fi
cargo build --release --locked -p nvarray
# libnvarray (the channels' C library), fio's external engine built against the installed
# fio's own headers (fetched from Debian's source package once), and the C example.
./scripts/build_native.sh
# The throw-away guest of the vhost-user-blk and NVMe-over-NBD tests (tests/guest.rs): Debian's
# qemu-system-x86 and cloud kernel extracted into target/guest (never installed: a kernel
# package runs boot hooks, and qemu-system-x86 7.2 conflicts with qemu-utils 10.0), and a
# busybox initramfs with fio and e2fsprogs. Idempotent and instant once done.
if [ "$(id -u)" -eq 0 ]; then
  python3 scripts/guest.py prepare >/dev/null
else
  echo "setup: skipping the test guest (scripts/guest.py prepare needs root for apt-get)" >&2
fi
