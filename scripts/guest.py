#!/usr/bin/env python3
"""A throw-away QEMU guest that tests nvarray's front ends with a real kernel's block layer.

    scripts/guest.py prepare [--dir DIR]
    scripts/guest.py run --job verify|reverify|mkfs|check|flushes|none
                         (--vhost-user-blk SOCKET | --nbd URL [--as nvme|virtio])
                         [--num-queues N] [--accel tcg|kvm] [--timeout S] [--console FILE]
                         [--kill-after-acks N] [--count N] [--dir DIR]
    scripts/guest.py check-records --image FILE --acked N
    scripts/guest.py selftest [--nvarray target/release/nvarray]

`prepare` (idempotent; a stamp makes a second call instant) installs with apt what is missing
(seabios, ipxe-qemu, qemu-system-data, busybox-static, and the libraries QEMU links), extracts
Debian's qemu-system-x86 7.2 and the newest linux-image-6.1.0-*-cloud-amd64-unsigned into DIR
(default target/guest; never installed: qemu-utils 10.0 conflicts with the former, and a kernel
package runs boot hooks), and builds DIR/initramfs.cpio.gz: static busybox, fio, mke2fs/e2fsck and
every library they load, the virtio modules this kernel lacks built in, and scripts/guest/init.

`run` boots it (TCG by default: these machines have no usable hardware KVM) against one disk,
prints the guest's console to FILE (--console), and ends with one JSON line on stdout:
    {"result": "ok"|"fail", "reason": ..., "job": ..., "acked": N|null, "seconds": T, ...}
exit status 0 only for "ok". With --kill-after-acks N (job flushes) QEMU is killed with SIGKILL as
soon as the console shows `NVARRAY-ACK N`; "acked" is then the last record the guest saw flushed,
and `check-records` verifies that blocks 0..=acked of the device's image hold their records.

Jobs (scripts/guest/init runs them in the guest; the disk is /dev/vda for virtio and
vhost-user-blk, /dev/nvme0n1 for --as nvme; it needs at least 64 MiB):
    verify    fio with verify=crc32c (4 KiB random writes from 2 jobs over 0-8 MiB, 128 KiB
              sequential over 16-24 MiB, libaio, O_DIRECT), a second fio process re-reading and
              verifying it all, and 1 MiB of dd oflag=direct / iflag=direct at 32 MiB
    reverify  only verify's re-read pass (a later boot: the data outlived the guest)
    mkfs      mkfs.ext4, 47 files of random content and a MANIFEST of their sha256, umount
    check     e2fsck -n -f (must be clean), read-only mount, sha256sum -c MANIFEST
    flushes   record n in 4 KiB block n, each O_DIRECT then fsync (a device flush), then
              `NVARRAY-ACK n` on the console; until killed (or --count N records)
    latency   4 KiB random reads at queue depth 1 (psync, O_DIRECT) for --count seconds
              (default 10): "latency" in the JSON line has the IOPS and the p50, p99 and p99.9
              completion latency in µs; meaningful only with --accel kvm (under TCG the
              guest's own emulation is most of it)
    none      boot, load the modules, power off
`selftest` runs them all against qemu-storage-daemon's vhost-user-blk export (the reference)
and, with --nvarray BIN, against `BIN serve` over NBD (NVMe and virtio-blk, a server restart
between mkfs and check), in about 35 s under TCG.

Importable: prepare(dir), run(...), check_records(image, acked), selftest(...).
"""

import argparse
import ctypes
import fcntl
import gzip
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(REPO, "target", "guest")
INIT_SCRIPT = os.path.join(REPO, "scripts", "guest", "init")
# Bump when what prepare() builds changes (the stamp also covers scripts/guest/init).
FORMAT = 1

HOST_PACKAGES = ["seabios", "ipxe-qemu", "qemu-system-data", "busybox-static"]
QEMU_PACKAGES = ["qemu-system-x86", "qemu-system-common"]
KERNEL_RE = re.compile(r"^linux-image-6\.1\.0-(\d+)-cloud-amd64-unsigned$")
# Modules the guest needs if the kernel has them as modules (each pulls its dependencies in):
# virtio-blk over PCI (vhost-user-blk-pci and virtio-blk-pci), NVMe, ext4 and its checksums.
WANTED_MODULES = ["virtio_pci", "virtio_blk", "nvme", "ext4", "crc32c_generic", "crc32c_intel"]
# Host programs copied into the initramfs with the libraries they load.
GUEST_PROGRAMS = ["/usr/bin/fio", "/usr/sbin/mke2fs", "/usr/sbin/mkfs.ext4", "/usr/sbin/e2fsck",
                  "/usr/sbin/fsck.ext4"]
GUEST_FILES = ["/etc/mke2fs.conf"]
BUSYBOX = "/bin/busybox"
RECORD = 4096


def log(msg):
    print(f"guest: {msg}", file=sys.stderr, flush=True)


def sh(cmd, **kw):
    """Runs a command, raising with its output on failure."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    return p.stdout


# ---------------------------------------------------------------- apt ----------------------------

def _installed(pkg):
    p = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return p.returncode == 0 and "install ok installed" in p.stdout


_apt_updated = False


def _apt_update():
    global _apt_updated
    if not _apt_updated:
        log("apt-get update")
        sh(["apt-get", "update", "-qq"])
        _apt_updated = True


def apt_install(pkgs):
    need = [p for p in pkgs if not _installed(p)]
    if not need:
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"missing Debian packages {need}: run as root or install them")
    _apt_update()
    log(f"apt-get install {' '.join(need)}")
    sh(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + need,
       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def apt_download(pkg, dest):
    """Downloads PKG's .deb into DEST (once) and returns its path."""
    os.makedirs(dest, exist_ok=True)
    prefix = pkg + "_"
    have = [f for f in os.listdir(dest) if f.startswith(prefix) and f.endswith(".deb")]
    if have:
        return os.path.join(dest, sorted(have)[-1])
    try:
        sh(["apt-get", "download", "-q", pkg], cwd=dest)
    except RuntimeError:
        _apt_update()
        sh(["apt-get", "download", "-q", pkg], cwd=dest)
    have = [f for f in os.listdir(dest) if f.startswith(prefix) and f.endswith(".deb")]
    if not have:
        raise RuntimeError(f"apt-get download {pkg} left no .deb in {dest}")
    return os.path.join(dest, sorted(have)[-1])


def newest_kernel_package():
    def search():
        out = subprocess.run(["apt-cache", "search", "--names-only",
                              r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        found = []
        for line in out.splitlines():
            name = line.split(" ", 1)[0]
            m = KERNEL_RE.match(name)
            if m:
                found.append((int(m.group(1)), name))
        return found

    found = search()
    if not found:
        _apt_update()
        found = search()
    if not found:
        raise RuntimeError("apt-cache finds no linux-image-6.1.0-*-cloud-amd64-unsigned")
    return max(found)[1]


def extract(deb, dest):
    os.makedirs(dest, exist_ok=True)
    sh(["dpkg-deb", "-x", deb, dest])


# ---------------------------------------------------------------- ldd ----------------------------

def ldd(path):
    """The files PATH loads: (resolved libraries, missing sonames). The loader is included."""
    p = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    libs, missing = [], []
    if "not a dynamic executable" in p.stdout:
        return libs, missing
    for line in p.stdout.splitlines():
        line = line.strip()
        if "=>" in line:
            name, rest = line.split("=>", 1)
            rest = rest.strip()
            if rest.startswith("not found"):
                missing.append(name.strip())
            elif rest.startswith("/"):
                libs.append(rest.split(" (", 1)[0])
        elif line.startswith("/"):
            libs.append(line.split(" (", 1)[0])
    return libs, missing


def deb_lib_depends(deb):
    """The lib* package names in a .deb's Depends."""
    dep = sh(["dpkg-deb", "-f", deb, "Depends"])
    names = []
    for alt in dep.split(","):
        name = alt.split("|")[0].strip().split(" ")[0].split(":")[0]
        if name.startswith("lib"):
            names.append(name)
    return names


# ---------------------------------------------------------------- kernel modules -----------------

def _modname(path):
    base = os.path.basename(path)
    for ext in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(ext):
            base = base[: -len(ext)]
            break
    return base.replace("-", "_")


def _read_module(path):
    """A module's ELF bytes, decompressed."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".xz"):
        import lzma
        data = lzma.decompress(data)
    elif path.endswith(".gz"):
        data = gzip.decompress(data)
    elif path.endswith(".zst"):
        data = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, check=True).stdout
    return data


def _modinfo_depends(elf):
    """The `depends=` of a module's .modinfo section (64-bit little-endian ELF)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        raise RuntimeError("not a 64-bit ELF module")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def section(i):
        name, _typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        return name, off, size

    _, stroff, _ = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        end = elf.index(b"\0", stroff + name)
        if elf[stroff + name:end] == b".modinfo":
            for entry in elf[off:off + size].split(b"\0"):
                if entry.startswith(b"depends="):
                    deps = entry[len(b"depends="):].decode()
                    return [d.replace("-", "_") for d in deps.split(",") if d]
            return []
    return []


def resolve_modules(moddir, wanted):
    """Loadable module files for WANTED and their dependencies, in load order; builtins skipped.
    Returns (ordered [(name, path)], builtin names among wanted, names absent from the kernel)."""
    builtin = set()
    bpath = os.path.join(moddir, "modules.builtin")
    if os.path.exists(bpath):
        with open(bpath) as f:
            builtin = {_modname(line.strip()) for line in f if line.strip()}
    files = {}
    for root, _dirs, names in os.walk(os.path.join(moddir, "kernel")):
        for n in names:
            if ".ko" in n:
                files[_modname(n)] = os.path.join(root, n)
    deps = {}
    depfile = os.path.join(moddir, "modules.dep")
    if os.path.exists(depfile):
        with open(depfile) as f:
            for line in f:
                if ":" in line:
                    mod, rest = line.split(":", 1)
                    deps[_modname(mod)] = [_modname(d) for d in rest.split()]

    def depends(name):
        if name not in deps:  # no modules.dep (a .deb ships none: depmod runs at install)
            deps[name] = _modinfo_depends(_read_module(files[name]))
        return deps[name]

    order, seen = [], set()

    def visit(name, stack=()):
        if name in seen or name in builtin:
            return
        if name in stack:
            raise RuntimeError(f"module dependency cycle at {name}")
        for d in depends(name):
            visit(d, stack + (name,))
        seen.add(name)
        order.append((name, files[name]))

    builtins, absent = [], []
    for w in wanted:
        if w in builtin:
            builtins.append(w)
        elif w in files:
            visit(w)
        else:
            absent.append(w)
    return order, builtins, absent


# ---------------------------------------------------------------- initramfs ----------------------

class Tree:
    """A staging tree that mirrors host paths, recreating the host's symlinks on the way
    (merged /usr: /bin, /lib, /lib64 are symlinks) so that the guest sees the same layout."""

    def __init__(self, root):
        self.root = root

    def _at(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def mkdir(self, path):
        os.makedirs(self._at(path), exist_ok=True)

    def add(self, path, depth=0):
        """Copies host PATH (following and recreating symlinks in every component)."""
        if depth > 40:
            raise RuntimeError(f"symlink loop at {path}")
        parts = [p for p in os.path.normpath(path).split("/") if p]
        cur = "/"
        for i, comp in enumerate(parts):
            nxt = os.path.join(cur, comp)
            if os.path.islink(nxt):
                target = os.readlink(nxt)
                dst = self._at(nxt)
                if not os.path.lexists(dst):
                    os.symlink(target, dst)
                resolved = os.path.normpath(os.path.join(cur, target))
                rest = parts[i + 1:]
                self.add(os.path.join(resolved, *rest) if rest else resolved, depth + 1)
                return
            if i < len(parts) - 1 or os.path.isdir(nxt):
                self.mkdir(nxt)
                cur = nxt
            else:
                dst = self._at(nxt)
                if not os.path.exists(dst):
                    shutil.copy2(nxt, dst)
                return

    def physical(self, path):
        """The host's physical path for PATH (where add() put its content)."""
        return os.path.realpath(path)


def build_initramfs(out, kernel_root, kver, log_modules=True):
    stage = out + ".tree"
    if os.path.exists(stage):
        shutil.rmtree(stage)
    os.makedirs(stage)
    t = Tree(stage)
    for d in ("/proc", "/sys", "/dev", "/tmp", "/mnt", "/run", "/etc", "/modules"):
        t.mkdir(d)
    # busybox and its applets, next to it (merged /usr: /bin/busybox is /usr/bin/busybox).
    if ldd(BUSYBOX) != ([], []):
        raise RuntimeError(f"{BUSYBOX} is not static (install busybox-static)")
    t.add(BUSYBOX)
    t.add("/sbin")
    t.add("/usr/sbin")
    bbdir = os.path.dirname(t.physical(BUSYBOX))
    real = {os.path.basename(p) for p in GUEST_PROGRAMS}
    applets = sh([BUSYBOX, "--list"]).split()
    for a in applets:
        if a in real or a in ("busybox", "init", "linuxrc"):
            continue
        dst = os.path.join(stage, bbdir.lstrip("/"), a)
        if not os.path.lexists(dst):
            os.symlink("busybox", dst)
    # Programs and every library they load (with the loader).
    libs = set()
    for prog in GUEST_PROGRAMS:
        if not os.path.exists(prog):
            raise RuntimeError(f"{prog} missing on the host (install fio, e2fsprogs)")
        t.add(prog)
        found, missing = ldd(prog)
        if missing:
            raise RuntimeError(f"{prog}: libraries not found: {missing}")
        libs.update(found)
    for lib in sorted(libs):
        t.add(lib)
    for f in GUEST_FILES:
        if os.path.exists(f):
            t.add(f)
    # Kernel modules, in load order.
    moddir = os.path.join(kernel_root, "lib", "modules", kver)
    order, builtins, absent = resolve_modules(moddir, WANTED_MODULES)
    if log_modules:
        log(f"modules built in: {', '.join(builtins) or '-'}; loaded from the initramfs: "
            f"{', '.join(n for n, _ in order) or '-'}; absent: {', '.join(absent) or '-'}")
    for need in ("virtio_blk", "virtio_pci", "nvme", "ext4"):
        if need in absent:
            raise RuntimeError(f"kernel {kver} has no {need}")
    lines = []
    for name, path in order:
        dst = f"/modules/{name}.ko"
        with open(os.path.join(stage, dst.lstrip("/")), "wb") as f:
            f.write(_read_module(path))
        lines.append(dst)
    with open(os.path.join(stage, "etc", "nvarray-modules"), "w") as f:
        f.write("\n".join(lines) + "\n")
    shutil.copyfile(INIT_SCRIPT, os.path.join(stage, "init"))
    os.chmod(os.path.join(stage, "init"), 0o755)
    # The initial console must exist before devtmpfs is mounted.
    if os.geteuid() == 0:
        os.mknod(os.path.join(stage, "dev", "console"), 0o600 | 0o020000, os.makedev(5, 1))
        os.mknod(os.path.join(stage, "dev", "null"), 0o666 | 0o020000, os.makedev(1, 3))
    # newc cpio (busybox's), gzip'd.
    paths = []
    for root, dirs, names in os.walk(stage):
        dirs.sort()
        rel = os.path.relpath(root, stage)
        if rel != ".":
            paths.append(rel)
        for n in sorted(names):
            paths.append(os.path.normpath(os.path.join(rel, n)))
        for d in dirs:  # symlinked dirs are not walked into but must be archived
            if os.path.islink(os.path.join(root, d)):
                paths.append(os.path.normpath(os.path.join(rel, d)))
    proc = subprocess.Popen([BUSYBOX, "cpio", "-o", "-H", "newc"], cwd=stage, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    data, err = proc.communicate(("\n".join(paths) + "\n").encode())
    if proc.returncode != 0:
        raise RuntimeError(f"busybox cpio failed: {err.decode(errors='replace')}")
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(gzip.compress(data, compresslevel=1))
    os.replace(tmp, out)
    shutil.rmtree(stage)
    return len(data)


# ---------------------------------------------------------------- prepare ------------------------

def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def paths(dir=DEFAULT_DIR):
    """Where prepare() puts things (read from the stamp)."""
    with open(os.path.join(dir, "stamp.json")) as f:
        return json.load(f)


def _inputs():
    """What the initramfs is made of, to rebuild it when any changes (size and mtime)."""
    out = {}
    for p in [BUSYBOX] + GUEST_PROGRAMS:
        try:
            st = os.stat(p)
            out[p] = f"{st.st_size}:{int(st.st_mtime)}"
        except FileNotFoundError:
            out[p] = None
    return out


def prepare(dir=DEFAULT_DIR, force=False):
    """Makes DIR ready to boot guests; returns the stamp (paths of qemu, kernel, initramfs)."""
    dir = os.path.abspath(dir)
    os.makedirs(dir, exist_ok=True)
    with open(os.path.join(dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one prepare at a time per DIR
        return _prepare(dir, force)


def _prepare(dir, force):
    stamp_path = os.path.join(dir, "stamp.json")
    want = {"format": FORMAT, "init_sha256": _sha(INIT_SCRIPT), "inputs": _inputs()}
    if not force and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            stamp = json.load(f)
        if all(stamp.get(k) == v for k, v in want.items()) and all(
                os.path.exists(stamp[k]) for k in ("qemu", "kernel", "initramfs")):
            return stamp
    t0 = time.monotonic()
    apt_install(HOST_PACKAGES)
    debs = os.path.join(dir, "debs")
    # QEMU 7.2 (extracted, not installed).
    qroot = os.path.join(dir, "qemu")
    qemu = os.path.join(qroot, "usr", "bin", "qemu-system-x86_64")
    qdebs = [apt_download(p, debs) for p in QEMU_PACKAGES]
    if not os.path.exists(qemu):
        for deb in qdebs:
            extract(deb, qroot)
    _, missing = ldd(qemu)
    if missing:
        # The libraries qemu-system-x86 depends on (not qemu-system-common's: display, sound,
        # USB, unused here), installed as usual: they do not conflict with qemu-utils 10.0.
        apt_install(sorted(set(deb_lib_depends(qdebs[0]))))
        _, missing = ldd(qemu)
        if missing:
            raise RuntimeError(f"{qemu} still misses {missing}")
    # The guest kernel (extracted, never installed).
    kpkg = newest_kernel_package()
    kroot = os.path.join(dir, "kernel")
    kdeb = apt_download(kpkg, debs)
    kver = kpkg[len("linux-image-"):-len("-unsigned")]
    kernel = os.path.join(kroot, "boot", f"vmlinuz-{kver}")
    if not os.path.exists(kernel):
        if os.path.exists(kroot):
            shutil.rmtree(kroot)
        extract(kdeb, kroot)
    # fio and e2fsprogs for the guest.
    apt_install(["fio", "e2fsprogs"])
    want["inputs"] = _inputs()
    initramfs = os.path.join(dir, "initramfs.cpio.gz")
    raw = build_initramfs(initramfs, kroot, kver)
    stamp = dict(want, qemu=qemu, qemu_module_dir=os.path.join(qroot, "usr", "lib", "x86_64-linux-gnu", "qemu"),
                 kernel=kernel, kernel_version=kver, initramfs=initramfs,
                 initramfs_bytes=raw, initramfs_gz_bytes=os.path.getsize(initramfs))
    with open(stamp_path + ".tmp", "w") as f:
        json.dump(stamp, f, indent=1)
    os.replace(stamp_path + ".tmp", stamp_path)
    log(f"prepared {dir} in {time.monotonic() - t0:.1f} s (kernel {kver}, initramfs "
        f"{raw >> 20} MiB, {stamp['initramfs_gz_bytes'] >> 20} MiB gzip'd)")
    return stamp


# ---------------------------------------------------------------- run ----------------------------

def _drive_url(url):
    return url.replace(",", ",,")


def qemu_command(stamp, job, vhost_user_blk=None, nbd=None, as_="nvme", num_queues=1, accel="tcg",
                 smp=2, mem_mib=512, count=None, verbose_kernel=False):
    if (vhost_user_blk is None) == (nbd is None):
        raise ValueError("give exactly one of vhost_user_blk and nbd")
    cmd = [stamp["qemu"], "-L", "/usr/share/seabios", "-L", "/usr/share/qemu",
           "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
           "-smp", str(smp), "-m", f"{mem_mib}M",
           "-object", f"memory-backend-memfd,id=mem,size={mem_mib}M,share=on",
           "-machine", "q35,memory-backend=mem"]
    if accel == "tcg":
        cmd += ["-accel", "tcg,thread=multi", "-cpu", "max"]
    elif accel == "kvm":
        cmd += ["-accel", "kvm", "-cpu", "host"]
    else:
        raise ValueError(f"accel {accel!r}: tcg or kvm")
    if vhost_user_blk is not None:
        cmd += ["-chardev", f"socket,id=c0,path={vhost_user_blk}",
                "-device", f"vhost-user-blk-pci,chardev=c0,num-queues={num_queues}"]
        dev = "/dev/vda"
    else:
        cmd += ["-drive", f"file={_drive_url(nbd)},format=raw,if=none,id=d0,cache=none"]
        if as_ == "nvme":
            cmd += ["-device", "nvme,drive=d0,serial=nvarray"]
            dev = "/dev/nvme0n1"
        elif as_ == "virtio":
            cmd += ["-device", f"virtio-blk-pci,drive=d0,num-queues={num_queues}"]
            dev = "/dev/vda"
        else:
            raise ValueError(f"--as {as_!r}: nvme or virtio")
    append = ["console=ttyS0", "panic=-1", "mitigations=off", "nokaslr"]
    if not verbose_kernel:
        append += ["quiet", "loglevel=4"]
    append += [f"nvarray.job={job}", f"nvarray.dev={dev}"]
    if count is not None:
        append.append(f"nvarray.count={count}")
    cmd += ["-kernel", stamp["kernel"], "-initrd", stamp["initramfs"], "-append", " ".join(append)]
    return cmd


RESULT_RE = re.compile(r"NVARRAY-GUEST-RESULT (ok|fail)\s*(.*)")
# The latency job's line: NVARRAY-LATENCY iops=N clat_p50_us=X clat_p99_us=Y clat_p99.9_us=Z
LATENCY_RE = re.compile(r"NVARRAY-LATENCY (.*)")
LATENCY_FIELD_RE = re.compile(r"([a-z0-9_.]+)=([0-9.]+)")
ACK_RE = re.compile(r"NVARRAY-ACK (\d+)")


def _die_with_parent():
    """In the child: SIGKILL when the parent dies, so no QEMU outlives a killed test."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run(job, vhost_user_blk=None, nbd=None, as_="nvme", num_queues=1, accel="tcg", timeout=120.0,
        console=None, kill_after_acks=None, count=None, dir=DEFAULT_DIR, smp=2, mem_mib=512,
        verbose_kernel=False, echo=False):
    """Boots the guest for JOB against one disk; returns the result dict (the CLI prints it as
    JSON). QEMU is always gone when this returns."""
    if kill_after_acks is not None and job != "flushes":
        raise ValueError("kill_after_acks is for the flushes job")
    stamp = prepare(dir)
    cmd = qemu_command(stamp, job, vhost_user_blk, nbd, as_, num_queues, accel, smp, mem_mib, count,
                       verbose_kernel)
    env = dict(os.environ, QEMU_MODULE_DIR=stamp["qemu_module_dir"])
    out = open(console, "w") if console else None
    if out:
        out.write("# " + " ".join(cmd) + "\n")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, preexec_fn=_die_with_parent)
    try:
        return _watch(proc, t0, out, job, timeout, kill_after_acks, echo)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if out:
            out.close()


def _watch(proc, t0, out, job, timeout, kill_after_acks, echo):
    lines = queue.Queue()

    def reader(stream, tag):
        for raw in iter(stream.readline, b""):
            # a line cut by the kill has no newline: shown, but never taken as an ack
            lines.put((tag, raw.decode("utf-8", "replace").rstrip("\r\n"), raw.endswith(b"\n")))
        lines.put((tag, None, True))

    for stream, tag in ((proc.stdout, ""), (proc.stderr, "[qemu] ")):
        threading.Thread(target=reader, args=(stream, tag), daemon=True).start()
    result = {"result": "fail", "reason": None, "job": job, "acked": None, "seconds": None,
              "init_seconds": None, "killed": False}
    verdict = verdict_at = killed_at = None
    qemu_errors = []
    open_streams = 2
    deadline = t0 + timeout
    while open_streams:
        now = time.monotonic()
        if verdict is None and killed_at is None and now > deadline:
            proc.kill()
            killed_at = now
            result["reason"] = f"timeout after {timeout:g} s"
        if verdict is not None and killed_at is None and now - verdict_at > 15:
            proc.kill()  # the guest said its result but did not power off
            killed_at = now
        try:
            tag, line, complete = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if line is None:
            open_streams -= 1
            continue
        if out:
            out.write(f"{time.monotonic() - t0:8.3f} {tag}{line}\n")
            out.flush()
        if echo:
            print(f"{tag}{line}", file=sys.stderr, flush=True)
        if tag:
            qemu_errors.append(line)
            continue
        if result["init_seconds"] is None and "NVARRAY-GUEST-INIT" in line:
            result["init_seconds"] = round(time.monotonic() - t0, 3)
        for m in ACK_RE.finditer(line if complete else ""):
            n = int(m.group(1))
            if result["acked"] is None or n > result["acked"]:
                result["acked"] = n
            if (kill_after_acks is not None and n >= kill_after_acks and killed_at is None
                    and verdict is None):
                proc.kill()  # SIGKILL: the point is an unclean death
                killed_at = time.monotonic()
                result["killed"] = True
        m = LATENCY_RE.search(line)
        if m and complete:
            result["latency"] = {k: float(v) for k, v in LATENCY_FIELD_RE.findall(m.group(1))}
        m = RESULT_RE.search(line)
        if m and verdict is None and complete:
            verdict = m.group(1)
            verdict_at = time.monotonic()
            result["reason"] = m.group(2).strip() or None
    rc = proc.wait()
    result["seconds"] = round((killed_at or time.monotonic()) - t0, 3)
    result["qemu_status"] = rc
    if result["killed"]:
        result["result"] = "ok"
        result["reason"] = f"killed with SIGKILL after NVARRAY-ACK {kill_after_acks}"
    elif verdict == "ok":
        result["result"] = "ok"
        if kill_after_acks is not None:
            result["result"] = "fail"
            result["reason"] = f"the guest finished before NVARRAY-ACK {kill_after_acks}"
    elif verdict is None and result["reason"] is None:
        tail = "; ".join(qemu_errors[-3:])
        result["reason"] = f"QEMU exited ({rc}) without a result line" + (f": {tail}" if tail else "")
    return result


# ---------------------------------------------------------------- records ------------------------

def record(n):
    head = f"nvarray-record {n}\n".encode()
    tail = f"nvarray-end {n}\n".encode()
    return head + b" " * (RECORD - len(head) - len(tail)) + tail


def check_records(image, acked):
    """Checks that blocks 0..=ACKED of IMAGE hold records 0..=ACKED (job flushes)."""
    bad = []
    beyond = 0
    with open(image, "rb") as f:
        for n in range(acked + 1):
            f.seek(n * RECORD)
            if f.read(RECORD) != record(n):
                bad.append(n)
        n = acked + 1
        while True:  # records the guest wrote but whose ack never reached the console
            f.seek(n * RECORD)
            if f.read(RECORD) != record(n):
                break
            beyond += 1
            n += 1
    return {"result": "ok" if not bad else "fail", "acked": acked, "missing": bad[:20],
            "missing_count": len(bad), "present_beyond_acked": beyond}


# ---------------------------------------------------------------- self-test ----------------------

def _start_daemon(cmd, sock, logpath, what):
    """Starts a disk server; returns its Popen once SOCK exists (10 s at most)."""
    if os.path.exists(sock):
        os.unlink(sock)
    logf = open(logpath, "w")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent)
    logf.close()
    end = time.monotonic() + 10
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > end:
            _stop_daemon(proc)
            with open(logpath) as f:
                raise RuntimeError(f"{what} did not start: {f.read()[-2000:]}")
        time.sleep(0.05)
    return proc


def _stop_daemon(proc, grace=30):
    """SIGTERM, then wait for it to exit (SIGKILL after GRACE seconds)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def selftest(dir=DEFAULT_DIR, accel="tcg", nvarray=None, workdir=None, size_mib=256, acks=50):
    """Boots every job against Debian's qemu-storage-daemon (vhost-user-blk, the reference) and,
    with NVARRAY (a path to the nvarray binary), against `nvarray serve` over NBD as NVMe and
    virtio-blk. Returns the list of step results (each has "step" and "result")."""
    import tempfile
    prepare(dir)
    tmp = tempfile.mkdtemp(prefix="nvarray-guest-", dir=workdir)
    steps = []

    def step(name, res):
        res = dict(res, step=name)
        steps.append(res)
        print(json.dumps(res), flush=True)
        return res

    def boot(name, job, **kw):
        return step(name, run(job, dir=dir, accel=accel, console=os.path.join(tmp, name + ".log"),
                              timeout=120, **kw))

    try:
        img = os.path.join(tmp, "qsd.img")
        sock = os.path.join(tmp, "vhost.sock")
        with open(img, "wb") as f:
            f.truncate(size_mib << 20)
        qsd = ["qemu-storage-daemon",
               "--blockdev", f"driver=file,node-name=f,filename={img},cache.direct=off",
               "--export", "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,"
                           f"addr.path={sock},writable=on,num-queues=2"]
        d = _start_daemon(qsd, sock, os.path.join(tmp, "qsd.out"), "qemu-storage-daemon")
        try:
            vu = dict(vhost_user_blk=sock, num_queues=2)
            boot("qsd-verify", "verify", **vu)
            boot("qsd-mkfs", "mkfs", **vu)
            boot("qsd-check", "check", **vu)
            fl = boot("qsd-flushes", "flushes", kill_after_acks=acks, **vu)
        finally:
            _stop_daemon(d)
        if fl["acked"] is not None:
            step("qsd-records", check_records(img, fl["acked"]))
        os.unlink(img)
        if nvarray:
            img = os.path.join(tmp, "nv.img")
            sock = os.path.join(tmp, "nv.sock")
            serve = [nvarray, "serve", "--listen", f"unix:{sock}", "--size", f"{size_mib}m",
                     "--backing", f"file:{img}"]
            url = f"nbd+unix:///nvarray?socket={sock}"
            d = _start_daemon(serve, sock, os.path.join(tmp, "nv-1.out"), "nvarray serve")
            try:
                boot("nbd-nvme-verify", "verify", nbd=url, as_="nvme")
                boot("nbd-nvme-mkfs", "mkfs", nbd=url, as_="nvme")
            finally:
                step("nbd-stop-1", {"result": "ok" if _stop_daemon(d) == 0 else "fail"})
            # A restarted server must serve what the first one acknowledged.
            d = _start_daemon(serve, sock, os.path.join(tmp, "nv-2.out"), "nvarray serve")
            try:
                boot("nbd-virtio-check", "check", nbd=url, as_="virtio", num_queues=2)
                fl = boot("nbd-nvme-flushes", "flushes", nbd=url, as_="nvme", kill_after_acks=acks)
            finally:
                step("nbd-stop-2", {"result": "ok" if _stop_daemon(d) == 0 else "fail"})
            if fl["acked"] is not None:
                step("nbd-records", check_records(img, fl["acked"]))
            os.unlink(img)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return steps


# ---------------------------------------------------------------- CLI ----------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="install/extract/build what a guest needs (idempotent)")
    p.add_argument("--dir", default=DEFAULT_DIR)
    p.add_argument("--force", action="store_true", help="rebuild even if the stamp says done")
    r = sub.add_parser("run", help="boot a guest for one job against one disk")
    r.add_argument("--dir", default=DEFAULT_DIR)
    r.add_argument("--job", required=True, choices=["verify", "reverify", "mkfs", "check", "flushes", "latency", "none"])
    g = r.add_mutually_exclusive_group(required=True)
    g.add_argument("--vhost-user-blk", metavar="SOCKET")
    g.add_argument("--nbd", metavar="URL", help="nbd+unix:///EXPORT?socket=PATH or nbd://HOST:PORT/EXPORT")
    r.add_argument("--as", dest="as_", choices=["nvme", "virtio"], default="nvme",
                   help="the guest device for --nbd (default nvme)")
    r.add_argument("--num-queues", type=int, default=1)
    r.add_argument("--accel", choices=["tcg", "kvm"], default="tcg")
    r.add_argument("--timeout", type=float, default=120.0)
    r.add_argument("--console", metavar="FILE")
    r.add_argument("--kill-after-acks", type=int, metavar="N")
    r.add_argument("--count", type=int, help="flushes: stop after N records (default: until "
                   "killed); latency: seconds (default 10)")
    r.add_argument("--smp", type=int, default=2)
    r.add_argument("--memory", type=int, default=512, help="MiB (default 512)")
    r.add_argument("--verbose-kernel", action="store_true", help="kernel messages on the console")
    r.add_argument("--echo", action="store_true", help="copy the console to stderr")
    c = sub.add_parser("check-records", help="verify the flushes job's records in a raw image")
    c.add_argument("--image", required=True)
    c.add_argument("--acked", type=int, required=True)
    t = sub.add_parser("selftest", help="every job against qemu-storage-daemon (and nvarray serve)")
    t.add_argument("--dir", default=DEFAULT_DIR)
    t.add_argument("--accel", choices=["tcg", "kvm"], default="tcg")
    t.add_argument("--nvarray", metavar="BIN", help="also test `BIN serve` over NBD")
    t.add_argument("--workdir", help="where the temporary images go (default: $TMPDIR)")
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        stamp = prepare(a.dir, force=a.force)
        print(json.dumps(stamp))
        return 0
    if a.cmd == "run":
        if a.kill_after_acks is not None and a.job != "flushes":
            ap.error("--kill-after-acks is for --job flushes")
        res = run(a.job, a.vhost_user_blk, a.nbd, a.as_, a.num_queues, a.accel, a.timeout, a.console,
                  a.kill_after_acks, a.count, a.dir, a.smp, a.memory, a.verbose_kernel, a.echo)
        print(json.dumps(res), flush=True)
        return 0 if res["result"] == "ok" else 1
    if a.cmd == "selftest":
        t0 = time.monotonic()
        steps = selftest(a.dir, a.accel, a.nvarray, a.workdir)
        failed = [st["step"] for st in steps if st["result"] != "ok"]
        print(f"guest selftest took {time.monotonic() - t0:.1f} s"
              + (f"; failed: {', '.join(failed)}" if failed else ""))
        print(f"selftest: {len(steps) - len(failed)} passed, {len(failed)} failed", flush=True)
        return 1 if failed else 0
    if a.cmd == "check-records":
        res = check_records(a.image, a.acked)
        print(json.dumps(res), flush=True)
        return 0 if res["result"] == "ok" else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
