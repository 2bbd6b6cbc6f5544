//! What the mount table says about a path: the mount it lies in, and whether that mount is a
//! FUSE file system whose server has gone away (after `kill -9` of `nvarray mount`, every
//! access under it fails with `ENOTCONN`, "Transport endpoint is not connected", until it is
//! unmounted, which the user must do: `fusermount3 -u -z DIR`).

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use nvarray_sys::mount_fields::unescape;

/// One line of `/proc/self/mounts`: what is mounted, where, and the file system type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub source: String,
    pub dir: PathBuf,
    pub fstype: String,
}

impl MountEntry {
    /// Whether it is a FUSE file system.
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.")
    }

    /// Whether it is an `nvarray mount`: FUSE, named `nvarray` (`fuse.nvarray` where the
    /// kernel shows the subtype, plain `fuse` where it does not).
    pub fn is_nvarray(&self) -> bool {
        self.is_fuse() && self.source == "nvarray"
    }
}

/// The mounts of this process's namespace, in mount order (later ones on top).
pub fn mount_table() -> Vec<MountEntry> {
    std::fs::read("/proc/self/mounts")
        .map(|bytes| parse_mounts(&bytes))
        .unwrap_or_default()
}

fn parse_mounts(bytes: &[u8]) -> Vec<MountEntry> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let mut fields = line.split(|&b| b == b' ');
            let source = String::from_utf8_lossy(&unescape(fields.next()?)).into_owned();
            let dir = unescape(fields.next()?);
            let fstype = String::from_utf8_lossy(fields.next()?).into_owned();
            Some(MountEntry {
                source,
                dir: PathBuf::from(OsString::from_vec(dir)),
                fstype,
            })
        })
        .collect()
}

/// `path` made absolute and cleaned of `.` and `..` without touching the file system (which
/// may be what fails: a dead mount answers every lookup with `ENOTCONN`).
pub fn absolute(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    // `pop` never goes above the root: the result stays absolute, with no `.` or `..` left.
    debug_assert!(out.is_absolute(), "{} is relative", out.display());
    debug_assert!(
        out.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
        "{} is not clean",
        out.display()
    );
    out
}

/// The mount `path` lies in: the deepest mount point that is `path` or one of its ancestors
/// (the last mounted, if several are stacked on one directory).
pub fn mount_of<'a>(table: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    let path = absolute(path);
    table
        .iter()
        .enumerate()
        .filter(|(_, m)| path.starts_with(&m.dir))
        .max_by_key(|(i, m)| (m.dir.components().count(), *i))
        .map(|(_, m)| m)
}

/// The FUSE mount that made `error` happen at `path`, if it is one whose server has gone
/// away: an `ENOTCONN` from a path under a FUSE mount.
pub fn dead_fuse_mount(path: &Path, error: &io::Error) -> Option<PathBuf> {
    if error.raw_os_error() != Some(libc::ENOTCONN) {
        return None;
    }
    let table = mount_table();
    mount_of(&table, path)
        .filter(|m| m.is_fuse())
        .map(|m| m.dir.clone())
}

/// What to tell a user whose `path` failed with `error`, when a dead FUSE mount is the cause:
/// which mount, and how to remove it.
pub fn dead_mount_advice(path: &Path, error: &io::Error) -> Option<String> {
    let mount = dead_fuse_mount(path, error)?;
    let mount = mount.display();
    Some(format!(
        "{mount} is a FUSE mount whose server has gone away (a killed `nvarray mount`?): \
         unmount it first (fusermount3 -u -z {mount}, or umount -l {mount})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(source: &str, dir: &str, fstype: &str) -> MountEntry {
        MountEntry {
            source: source.into(),
            dir: dir.into(),
            fstype: fstype.into(),
        }
    }

    #[test]
    fn the_mount_table_is_parsed_with_its_escapes() {
        let text = b"/dev/vda1 / ext4 rw 0 0\n\
                     nvarray /tmp/a\\040b fuse rw,nosuid 0 0\n\
                     tmpfs /tmp tmpfs rw 0 0\n";
        let table = parse_mounts(text);
        assert_eq!(
            table,
            vec![
                entry("/dev/vda1", "/", "ext4"),
                entry("nvarray", "/tmp/a b", "fuse"),
                entry("tmpfs", "/tmp", "tmpfs"),
            ]
        );
        let nvarray: Vec<bool> = table.iter().map(MountEntry::is_nvarray).collect();
        assert_eq!(nvarray, [false, true, false]);
        assert!(entry("nvarray", "/m", "fuse.nvarray").is_nvarray());
        assert!(!entry("sshfs", "/m", "fuse.sshfs").is_nvarray());
    }

    #[test]
    fn a_path_lies_in_its_deepest_mount_and_the_top_of_a_stack() {
        let table = vec![
            entry("/dev/vda1", "/", "ext4"),
            entry("tmpfs", "/tmp", "tmpfs"),
            entry("nvarray", "/tmp/m", "fuse.nvarray"),
            entry("other", "/tmp/m", "fuse.other"),
        ];
        let check = |path: &str, expected: &str| {
            assert_eq!(
                mount_of(&table, Path::new(path)).map(|m| m.fstype.as_str()),
                Some(expected),
                "{path}"
            )
        };
        check("/tmp/m/disk", "fuse.other");
        check("/tmp/m", "fuse.other");
        check("/tmp/mm", "tmpfs");
        check("/tmp/m/../x", "tmpfs");
        check("/etc", "ext4");
    }

    #[test]
    fn absolute_paths_are_cleaned_without_the_file_system() {
        assert_eq!(absolute(Path::new("/a/./b/../c/")), PathBuf::from("/a/c"));
        assert_eq!(absolute(Path::new("/..")), PathBuf::from("/"));
        let here = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("x/./y")), here.join("x/y"));
    }
}
