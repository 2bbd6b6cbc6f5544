//! The file system the kernel sees: a read-only root directory holding one regular file,
//! `disk`, whose bytes are the device's.
//!
//! Every request is answered; none can panic the server. Names other than `disk`, inodes
//! other than the two, and every change to the directory get an error. The file's size is
//! fixed: a `setattr` may only "change" it to the size it has (what `open(O_TRUNC)` of an
//! empty file would do is refused, so a stray `> DIR/disk` cannot wipe the device).

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use nvarray_host::options::pin_this_thread;

use crate::disk::{DiskIo, IO_BYTES_MAX};

/// The file's name in the mounted directory.
pub const DISK_NAME: &str = "disk";

const DISK_INO: INodeNo = INodeNo(2);
// `attr_of` and the handlers tell the two inodes apart by number.
const _: () = assert!(DISK_INO.0 != INodeNo::ROOT.0);

/// How long the kernel may cache names and attributes. Nothing here ever changes while
/// mounted, so this only bounds how long a stale entry could outlive a remount.
const TTL: Duration = Duration::from_secs(60);

/// Block size `stat` reports: the device's block, but at least a page, the unit the loop
/// driver and file systems prefer.
const PREFERRED_IO_BYTES_MIN: u32 = 4096;

pub(crate) struct DiskFs {
    io: Arc<Mutex<DiskIo>>,
    dir_attr: FileAttr,
    disk_attr: FileAttr,
    /// Called once, when the session is over and the kernel no longer sends requests.
    on_end: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl DiskFs {
    pub(crate) fn new(io: Arc<Mutex<DiskIo>>, on_end: Box<dyn FnOnce() + Send>) -> Self {
        let (size_bytes, block_bytes) = {
            let io = lock(&io);
            (io.size_bytes(), io.block_bytes())
        };
        let now = SystemTime::now();
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let attr = |ino, kind, perm, size: u64, nlink| FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind,
            perm,
            nlink,
            uid,
            gid,
            rdev: 0,
            flags: 0,
            blksize: (block_bytes as u32).max(PREFERRED_IO_BYTES_MIN),
        };
        DiskFs {
            io,
            // The directory is read-only: nothing can be created in it or removed from it.
            dir_attr: attr(INodeNo::ROOT, FileType::Directory, 0o555, 0, 2),
            disk_attr: attr(DISK_INO, FileType::RegularFile, 0o644, size_bytes, 1),
            on_end: Mutex::new(Some(on_end)),
        }
    }

    fn attr_of(&self, ino: INodeNo) -> Option<&FileAttr> {
        match ino {
            INodeNo::ROOT => Some(&self.dir_attr),
            DISK_INO => Some(&self.disk_attr),
            _ => None,
        }
    }

    /// The errno for file I/O on an inode other than the file.
    fn not_the_disk(ino: INodeNo) -> Errno {
        if ino == INodeNo::ROOT {
            Errno::EISDIR
        } else {
            Errno::EBADF
        }
    }
}

/// The disk's lock. A panic while it was held (a bug) leaves the queue pair in an unknown
/// state, but refusing every later request would be worse than going on: the device itself
/// checks every command.
fn lock(io: &Mutex<DiskIo>) -> MutexGuard<'_, DiskIo> {
    io.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Drop for DiskFs {
    fn drop(&mut self) {
        let on_end = self
            .on_end
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(on_end) = on_end {
            on_end();
        }
    }
}

impl Filesystem for DiskFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The one serving thread runs every request from here on: `--cpus` pins it.
        if let Some(cpu) = lock(&self.io).device().host_cpu(0) {
            // The list was checked when the device opened; a failure here (the process's CPUs
            // narrowed since) leaves the thread where the scheduler puts it.
            if let Err(e) = pin_this_thread(cpu) {
                eprintln!("nvarray: --cpus: cannot pin the FUSE thread to CPU {cpu}: {e}");
            }
        }
        // The scratch buffer holds the largest read; tell the kernel so (the mount's
        // max_read option says it for reads, this for writes and readahead).
        if let Err(nearest) = config.set_max_write(IO_BYTES_MAX) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_readahead(IO_BYTES_MAX) {
            let _ = config.set_max_readahead(nearest);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == DISK_NAME {
            reply.entry(&TTL, &self.disk_attr, Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino) {
            Some(attr) => reply.attr(&TTL, attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(attr) = self.attr_of(ino) else {
            reply.error(Errno::ENOENT);
            return;
        };
        // The kernel sets ctime itself alongside any change; it alone is not a change.
        let changes_metadata = mode.is_some()
            || uid.is_some()
            || gid.is_some()
            || atime.is_some()
            || mtime.is_some()
            || crtime.is_some()
            || flags.is_some();
        if changes_metadata {
            reply.error(Errno::EPERM);
            return;
        }
        match size {
            // The device's size is fixed: only "resizing" to the same size is accepted.
            Some(size) if ino != DISK_INO || size != attr.size => reply.error(Errno::EPERM),
            _ => reply.attr(&TTL, attr),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino {
            // Direct I/O: no page cache for the file, so every read and write reaches the
            // device (and its timing), and a write is on the device when it is acknowledged.
            DISK_INO => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            INodeNo::ROOT => reply.error(Errno::EISDIR),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != DISK_INO {
            reply.error(Self::not_the_disk(ino));
            return;
        }
        let mut io = lock(&self.io);
        match io.read(offset, size) {
            Ok(data) => reply.data(data),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != DISK_INO {
            reply.error(Self::not_the_disk(ino));
            return;
        }
        let mut io = lock(&self.io);
        match io.write(offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Called on every close. Closing promises no durability (fsync does), and every
        // acknowledged write is already on the device, so there is nothing to do.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if ino != DISK_INO {
            reply.ok();
            return;
        }
        match lock(&self.io).fsync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (DISK_INO, FileType::RegularFile, DISK_NAME),
        ];
        // Each entry's offset is the index of the next one, where a later call resumes.
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let bsize = self.disk_attr.blksize;
        let blocks = self.disk_attr.size / u64::from(bsize);
        // All of it is used by the one file, and no file can be added.
        reply.statfs(blocks, 0, 0, 2, 0, bsize, 255, bsize);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        // The device has no trim or deallocate command, and its space is always allocated.
        // The loop driver turns discards into fallocate; this answer makes it stop sending
        // them (mkfs then skips its discard pass).
        reply.error(Errno::EOPNOTSUPP);
    }

    // The directory holds exactly one file: nothing can be created, removed or renamed.

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EPERM);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EPERM);
    }
}
