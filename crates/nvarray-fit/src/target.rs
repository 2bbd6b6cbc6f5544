//! What `nvarray fit collect` runs on, and the checks before it writes anything: a block device
//! with no mounted file system, swap or holder on it and (unless `--destroy-data`) nothing but
//! zeros where it looks; or a regular file, made when it does not exist.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// A file made for a collection is this long unless `--size` says otherwise.
pub const DEFAULT_FILE_BYTES: u64 = 1 << 30;

/// How much is read at each place the data check looks.
const SAMPLE_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Block,
    File,
}

/// A device or file checked and ready for fio.
#[derive(Clone, Debug)]
pub struct Target {
    pub path: PathBuf,
    pub kind: TargetKind,
    /// The bytes the jobs range over, from offset 0.
    pub span_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is neither a block device nor a regular file (a directory or a character device?); give a device such as /dev/nvme0n1 or a file path")]
    NotDeviceOrFile { path: String },
    #[error("{path} is in use: {what}; unmount it (or swapoff, or remove the holder) first. Nothing was written")]
    InUse { path: String, what: String },
    #[error("{path} holds data (a non-zero byte at offset {offset}); collecting writes over all of it. Pass --destroy-data if that is what you want. Nothing was written")]
    HasData { path: String, offset: u64 },
    #[error("--size {size} is more than {path} holds ({capacity} bytes)")]
    TooLarge {
        path: String,
        size: u64,
        capacity: u64,
    },
    #[error("{path}: a span of {size} bytes is too small: give at least 64 MiB, so the largest jobs (1 MiB at depth 128) have room")]
    TooSmall { path: String, size: u64 },
}

/// The smallest span a collection accepts (128 requests of 1 MiB in flight, and a half).
pub const MIN_SPAN_BYTES: u64 = 64 << 20;

/// Checks `path` and settles the span: the whole device or file, or the first `size` bytes.
/// A file that does not exist is made (`size`, or `DEFAULT_FILE_BYTES`, long).
pub fn prepare(path: &Path, size: Option<u64>, destroy_data: bool) -> Result<Target, TargetError> {
    let shown = path.display().to_string();
    let io = |source| TargetError::Io {
        path: shown.clone(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let span = size.unwrap_or(DEFAULT_FILE_BYTES);
            check_span(&shown, span)?;
            let f = File::create_new(path).map_err(io)?;
            f.set_len(span).map_err(io)?;
            return Ok(Target {
                path: path.to_path_buf(),
                kind: TargetKind::File,
                span_bytes: span,
            });
        }
        Err(e) => return Err(io(e)),
    };
    use std::os::unix::fs::FileTypeExt;
    let (kind, capacity) = if meta.file_type().is_block_device() {
        refuse_in_use(path, &shown)?;
        (TargetKind::Block, block_bytes(path).map_err(io)?)
    } else if meta.is_file() {
        (TargetKind::File, meta.len())
    } else {
        return Err(TargetError::NotDeviceOrFile { path: shown });
    };
    let span = match (size, kind) {
        (Some(s), TargetKind::Block) if s > capacity => {
            return Err(TargetError::TooLarge {
                path: shown,
                size: s,
                capacity,
            })
        }
        (Some(s), _) => s,
        (None, _) => capacity,
    };
    check_span(&shown, span)?;
    if !destroy_data {
        if let Some(offset) = first_data(path, capacity).map_err(io)? {
            return Err(TargetError::HasData {
                path: shown,
                offset,
            });
        }
    }
    if kind == TargetKind::File && span > capacity {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(span))
            .map_err(io)?;
    }
    Ok(Target {
        path: path.to_path_buf(),
        kind,
        span_bytes: span,
    })
}

fn check_span(path: &str, size: u64) -> Result<(), TargetError> {
    if size < MIN_SPAN_BYTES {
        return Err(TargetError::TooSmall {
            path: path.into(),
            size,
        });
    }
    Ok(())
}

/// The first non-zero byte found where the check looks (the first, middle and last MiB), or
/// `None` when all of it is zero: a fresh or discarded device, or a new file.
fn first_data(path: &Path, capacity: u64) -> std::io::Result<Option<u64>> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; SAMPLE_BYTES];
    let sample = SAMPLE_BYTES as u64;
    let mut offsets = vec![0, (capacity / 2) & !4095, capacity.saturating_sub(sample)];
    offsets.dedup();
    for start in offsets {
        f.seek(SeekFrom::Start(start))?;
        let mut filled = 0;
        while filled < buf.len() {
            match f.read(&mut buf[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        if let Some(i) = buf[..filled].iter().position(|&b| b != 0) {
            return Ok(Some(start + i as u64));
        }
    }
    Ok(None)
}

/// The device's name in sysfs (`/dev/loop0` → `loop0`, `/dev/mapper/x` → `dm-0`).
fn sysfs_name(path: &Path) -> std::io::Result<String> {
    let real = std::fs::canonicalize(path)?;
    Ok(real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default())
}

fn block_bytes(path: &Path) -> std::io::Result<u64> {
    let name = sysfs_name(path)?;
    let sectors = std::fs::read_to_string(format!("/sys/class/block/{name}/size"))?;
    sectors
        .trim()
        .parse::<u64>()
        .map(|s| s * 512)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Refuses a device with a mounted file system, swap or holder (device mapper, md) on it or on
/// one of its partitions.
fn refuse_in_use(path: &Path, shown: &str) -> Result<(), TargetError> {
    let name = sysfs_name(path).map_err(|source| TargetError::Io {
        path: shown.into(),
        source,
    })?;
    let in_use = |what: String| TargetError::InUse {
        path: shown.into(),
        what,
    };
    // The device and its partitions: names and major:minor numbers.
    let mut names = vec![name.clone()];
    if let Ok(entries) = std::fs::read_dir(format!("/sys/class/block/{name}")) {
        for e in entries.flatten() {
            if e.path().join("partition").exists() {
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    let numbers: Vec<String> = names
        .iter()
        .filter_map(|n| std::fs::read_to_string(format!("/sys/class/block/{n}/dev")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    let is_ours = |source: &str| {
        std::fs::canonicalize(source)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .is_some_and(|n| names.contains(&n))
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some(m) = mounted_on(&mountinfo, &numbers, &is_ours) {
        return Err(in_use(format!("mounted on {m}")));
    }
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    if let Some(s) = swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .find(|s| is_ours(s))
    {
        return Err(in_use(format!("swap ({s})")));
    }
    for n in &names {
        let holders = std::fs::read_dir(format!("/sys/class/block/{n}/holders"))
            .map(|d| d.flatten().count())
            .unwrap_or(0);
        if holders > 0 {
            return Err(in_use(format!(
                "{n} has {holders} holder(s) (device mapper, md, ...)"
            )));
        }
    }
    Ok(())
}

/// The mount point of the first mount in `mountinfo` whose device number is one of `numbers`
/// or whose source `is_ours` (btrfs and others report an anonymous device number).
fn mounted_on(
    mountinfo: &str,
    numbers: &[String],
    is_ours: &dyn Fn(&str) -> bool,
) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|&f| f == "-")?;
        let (number, point, source) = (fields.get(2)?, fields.get(4)?, fields.get(dash + 2)?);
        (numbers.iter().any(|n| n == number) || is_ours(source)).then(|| point.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_is_found_by_device_number_or_by_source() {
        let info = "22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    40 22 0:45 / /data rw shared:2 - btrfs /dev/loop3 rw\n";
        let never = |_: &str| false;
        assert_eq!(
            mounted_on(info, &["253:0".into()], &never).as_deref(),
            Some("/")
        );
        assert_eq!(mounted_on(info, &["7:1".into()], &never), None);
        let loop3 = |s: &str| s == "/dev/loop3";
        assert_eq!(
            mounted_on(info, &["7:3".into()], &loop3).as_deref(),
            Some("/data")
        );
    }

    #[test]
    fn a_file_with_data_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        let mut bytes = vec![0u8; 80 << 20];
        bytes[(80 << 20) - 10] = 7;
        std::fs::write(&path, &bytes).unwrap();
        let err = prepare(&path, None, false).unwrap_err();
        assert!(matches!(err, TargetError::HasData { offset, .. } if offset == (80 << 20) - 10));
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing written");
        let t = prepare(&path, None, true).unwrap();
        assert_eq!((t.kind, t.span_bytes), (TargetKind::File, 80 << 20));
    }

    #[test]
    fn a_new_file_is_made_and_a_directory_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new");
        let t = prepare(&path, Some(64 << 20), false).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 << 20);
        assert_eq!(t.span_bytes, 64 << 20);
        assert!(matches!(
            prepare(dir.path(), None, true),
            Err(TargetError::NotDeviceOrFile { .. })
        ));
        assert!(matches!(
            prepare(&dir.path().join("tiny"), Some(1 << 20), false),
            Err(TargetError::TooSmall { .. })
        ));
    }
}
