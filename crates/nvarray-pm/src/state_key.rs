//! The name of a backing file that every mount namespace agrees on, which names its NVM-tier
//! state (`pool::nvm_file_path`).
//!
//! Processes share a pool through one state: its log, its cache and its locks. The state was
//! found by the backing file's canonical path, but a process in a container reaches the same
//! file through a bind mount at another path, and so made a state of its own: every container
//! then logged, cached and wrote back the file on its own, with no locks between them. (Found
//! by the vNVML seed's containers study, issue 42: four mount namespaces, one pool, four
//! states; each container's write-back could overwrite another's newer commits.)
//!
//! The key is the file's path *inside its file system* with the file system's id:
//! `FSID:PATH`, where `PATH` is the root of the mount the file is reached through
//! (`/proc/self/mountinfo`, field 4) joined with the rest of its canonical path, and `FSID` is
//! `statvfs`'s `f_fsid`. A bind mount of a directory shows the same file system at another
//! mount point with that directory as its root, so every namespace computes the same key. The
//! device number is left out, as it is from the file's identity (`file_identity.rs`): it can
//! change at a reboot, while a state on a DAX file system survives one; ext4's and XFS's
//! `f_fsid` come from their UUIDs. Where either cannot be read, the key is the canonical path.

use std::ffi::CString;
use std::path::{Component, Path};

use nvarray_sys::mount_fields::unescape_text;

/// The key of the backing file at `canonical` (an absolute path without links).
pub(crate) fn of(canonical: &Path) -> String {
    let plain = || canonical.to_string_lossy().into_owned();
    let Some(fsid) = fsid(canonical) else {
        return plain();
    };
    match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(mountinfo) => within_file_system(&mountinfo, canonical)
            .map_or_else(plain, |path| format!("{fsid:016x}:{path}")),
        Err(_) => plain(),
    }
}

fn fsid(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is NUL-terminated and `st` is writable memory of the struct's size, which
    // statvfs fills when it returns 0.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    // `f_fsid` is an unsigned long: 64 bits here, 32 on 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    // SAFETY: statvfs returned 0, so it filled `st`.
    (rc == 0).then(|| unsafe { st.assume_init() }.f_fsid as u64)
}

/// `canonical` as a path inside its file system: the root of the mount it is reached through
/// (the one with the longest mount point above it; of mounts stacked on one point, the last
/// listed, which is on top) joined with the rest. `None` when no mount is above it.
fn within_file_system(mountinfo: &str, canonical: &Path) -> Option<String> {
    let mut best: Option<(usize, String, String)> = None;
    for line in mountinfo.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT-POINT ...
        let mut fields = line.split(' ');
        let (Some(root), Some(point)) = (fields.nth(3), fields.next()) else {
            continue;
        };
        let point = unescape_text(point);
        let Ok(rest) = canonical.strip_prefix(&point) else {
            continue;
        };
        let depth = Path::new(&point).components().count();
        if best.as_ref().is_none_or(|(d, _, _)| depth >= *d) {
            best = Some((
                depth,
                unescape_text(root),
                rest.to_string_lossy().into_owned(),
            ));
        }
    }
    let (_, root, rest) = best?;
    let mut path = std::path::PathBuf::from(root);
    for c in Path::new(&rest).components() {
        if let Component::Normal(part) = c {
            path.push(part);
        }
    }
    Some(path.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The root file system, tmpfs on /dev/shm, and (as a container sees it) the directory
    /// /srv/db of the root file system bind-mounted at /data, and a name with a space.
    const MOUNTINFO: &str = "\
22 1 252:0 / / rw,relatime - ext4 /dev/vda rw
25 22 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
40 22 252:0 /srv/db /data rw,relatime - ext4 /dev/vda rw
41 22 252:0 /srv/my\\040db /my\\040data rw,relatime - ext4 /dev/vda rw
42 40 0:23 / /data/shm rw,relatime - tmpfs tmpfs rw
";

    #[test]
    fn a_file_has_one_path_inside_its_file_system_whatever_mount_reaches_it() {
        let inside = |p: &str| within_file_system(MOUNTINFO, Path::new(p)).unwrap();
        assert_eq!(inside("/srv/db/app.pool"), "/srv/db/app.pool");
        assert_eq!(inside("/data/app.pool"), "/srv/db/app.pool");
        assert_eq!(inside("/data/sub/app.pool"), "/srv/db/sub/app.pool");
        assert_eq!(inside("/my data/a.pool"), "/srv/my db/a.pool");
        assert_eq!(inside("/dev/shm/a.pool"), "/a.pool");
        // A mount on top of a bind mount: the deeper mount point wins.
        assert_eq!(inside("/data/shm/a.pool"), "/a.pool");
        // A name that only begins like a mount point is not under it.
        assert_eq!(inside("/database/a.pool"), "/database/a.pool");
    }

    #[test]
    fn stacked_mounts_take_the_last_listed() {
        let stacked = format!("{MOUNTINFO}50 22 0:30 /other /data rw - ext4 /dev/vdb rw\n");
        assert_eq!(
            within_file_system(&stacked, Path::new("/data/app.pool")).unwrap(),
            "/other/app.pool"
        );
    }

    #[test]
    fn this_machines_key_names_the_file_system() {
        let key = of(&std::env::temp_dir().canonicalize().unwrap());
        assert!(key.contains(':'), "{key}");
    }
}
