#!/usr/bin/env bash
# Builds the native (C) side of libnvarray: the library itself (cargo, crate nvarray-clib),
# fio's external ioengine native/fio-engine/nvarray_fio.c, the C example
# native/examples/nvarray_example.c and the SQLite VFS native/sqlite-vfs/nvarray_sqlite.c over
# nvarray-pm. See native/README.md.
#
#   scripts/build_native.sh                      # everything
#   NVARRAY_NATIVE_SKIP_CARGO=1 scripts/build_native.sh   # use the libnvarray.so already built
#
# The engine is compiled against the headers of the very fio that is installed (Debian's fio
# package): an external engine reads fio's own structures (struct thread_data, io_u, fio_file),
# so it must see them as that fio binary was built. The script fetches that fio's Debian
# source once into target/native/fio-src and runs its ./configure (for config-host.h); nothing
# of fio itself is built. Safe to run again: the source is fetched only once and the two C
# files are small, so they are always recompiled.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
native=$root/target/native
fio_src=$native/fio-src
release=$root/target/release
mkdir -p "$native"

command -v fio >/dev/null || { echo "build_native: fio is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
command -v gcc >/dev/null || { echo "build_native: gcc is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
# "fio-3.33" -> "3.33"
fio_version=$(fio --version)
fio_version=${fio_version#fio-}

# --- a. fio's source, once --------------------------------------------------------------------
if [ ! -f "$fio_src/config-host.h" ]; then
  echo "build_native: fetching the source of the installed fio $fio_version (Debian package source)"
  [ "$(id -u)" -eq 0 ] || { echo "build_native: fetching fio's source needs root (apt-get update)" >&2; exit 1; }
  tmp=$(mktemp -d "$native/fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # apt's notes: a sources file that also lists deb-src. Keep "deb" in it: an update that lists
  # only deb-src would drop the binary package lists.
  mkdir -p "$tmp/sources" "$tmp/download"
  # apt downloads as its sandbox user _apt where it can write.
  chmod 755 "$tmp"
  chown _apt "$tmp/download" 2>/dev/null || true
  sed 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources \
    > "$tmp/sources/all.sources"
  apt-get -qq -o Dir::Etc::SourceParts="$tmp/sources" update
  # The Debian version of the installed package (e.g. 3.33-3), so the source is that one.
  deb_version=$(dpkg-query -W -f='${Version}' fio 2>/dev/null) || {
    echo "build_native: the installed fio is not Debian's package fio; install it (scripts/setup.sh)" >&2
    exit 1
  }
  (cd "$tmp/download" &&
    apt-get -qq -o Dir::Etc::SourceParts="$tmp/sources" source --download-only "fio=$deb_version")
  upstream=${deb_version%-*}
  upstream=${upstream#*:}
  orig="$tmp/download/fio_${upstream}.orig.tar.gz"
  [ -f "$orig" ] || { echo "build_native: apt-get source fio=$deb_version gave no ${orig##*/}" >&2; exit 1; }
  if [ "$upstream" != "$fio_version" ]; then
    echo "build_native: fetched fio source $upstream but the installed fio is $fio_version" >&2
    exit 1
  fi
  mkdir -p "$tmp/src"
  tar -xzf "$orig" -C "$tmp/src" --strip-components=1
  # The version the source itself declares must be the installed one too.
  src_version=$(sed -n 's/^DEF_VER=fio-//p' "$tmp/src/FIO-VERSION-GEN")
  if [ "$src_version" != "$fio_version" ]; then
    echo "build_native: fio source declares version $src_version, the installed fio is $fio_version" >&2
    exit 1
  fi
  # config-host.h only; fio itself is not built. Debian's own patches touch only configure's
  # log and the Makefile, and its configure flags (--disable-native --enable-gfio
  # --enable-libnbd) pick engines and compiler flags: the structures an engine reads come out
  # the same. (Optional libraries change only io_u's last member, a union fio sizes, and
  # CUDA's fields at the end of thread_data, which Debian builds without.)
  (cd "$tmp/src" && ./configure --disable-native >"$tmp/configure.log" 2>&1) || {
    cat "$tmp/configure.log" >&2
    echo "build_native: fio's ./configure failed" >&2
    exit 1
  }
  rm -rf "$fio_src"
  mv "$tmp/src" "$fio_src"
  rm -rf "$tmp"
  trap - EXIT
fi
src_version=$(sed -n 's/^DEF_VER=fio-//p' "$fio_src/FIO-VERSION-GEN")
if [ "$src_version" != "$fio_version" ]; then
  echo "build_native: $fio_src is fio $src_version but the installed fio is $fio_version;" \
    "remove $fio_src to fetch the matching source" >&2
  exit 1
fi

# --- b. libnvarray.so, libnvarray_pm.so -------------------------------------------------------
if [ "${NVARRAY_NATIVE_SKIP_CARGO:-0}" != 1 ]; then
  cargo build --release --locked -p nvarray-clib -p nvarray-pm
fi
[ -f "$release/libnvarray.so" ] || {
  echo "build_native: $release/libnvarray.so is missing (cargo build --release -p nvarray-clib)" >&2
  exit 1
}

# --- c. fio's external engine -----------------------------------------------------------------
cflags=(-O2 -g -Wall -Werror -D_GNU_SOURCE -I "$root/native/include")
link=(-L "$release" -lnvarray -Wl,-rpath,"$release")
# As fio's engines/skeleton_external.c builds one: fio's headers with its config-host.h
# included first, position-independent and shared. The engine's calls into fio (log_err,
# io_u_queued, ...) stay undefined here and resolve, when fio dlopens the engine, against the
# fio binary, which exports its symbols. libnvarray is found through the rpath.
gcc "${cflags[@]}" -include "$fio_src/config-host.h" -I "$fio_src" -shared -fPIC -rdynamic \
  -o "$native/nvarray-fio.so" "$root/native/fio-engine/nvarray_fio.c" "${link[@]}"

# --- d. the C example -------------------------------------------------------------------------
gcc "${cflags[@]}" -o "$native/nvarray-example" "$root/native/examples/nvarray_example.c" "${link[@]}"

# --- e. the SQLite VFS over nvarray-pm -------------------------------------------------------
# Linked against the process's own SQLite (libsqlite3.so.0: the shell's, Python's), so it
# registers the VFS directly, loaded by `.load` or by any program that calls
# nvarray_sqlite_register().
[ -f "$release/libnvarray_pm.so" ] || {
  echo "build_native: $release/libnvarray_pm.so is missing (cargo build --release -p nvarray-pm)" >&2
  exit 1
}
gcc -O2 -g -Wall -Werror -D_GNU_SOURCE -I "$root/crates/nvarray-pm/include" -shared -fPIC \
  -o "$native/nvarray-sqlite.so" "$root/native/sqlite-vfs/nvarray_sqlite.c" \
  -L "$release" -lnvarray_pm -Wl,-rpath,"$release" -lsqlite3

echo "build_native: built"
echo "  $release/libnvarray.so"
echo "  $native/nvarray-fio.so     (fio --ioengine=external:$native/nvarray-fio.so)"
echo "  $native/nvarray-example"
echo "  $native/nvarray-sqlite.so  (sqlite3: .load $native/nvarray-sqlite, then vfs=nvarray)"
