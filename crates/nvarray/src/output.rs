//! Output files named on the command line (`sweep --out`, `pm-bench ycsb --plot`), checked
//! before a long run starts, so a mistyped directory fails at once with exit 2 instead of
//! after every point has run and its results are lost.

use std::path::Path;

use crate::input_error;

/// Refuses `path` as an output file unless it can be opened for writing there (its
/// directory exists and takes new files) and is not a directory. Leaves no file behind.
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if path.is_dir() {
        return Err(input_error(format!(
            "cannot write {}: it is a directory; name a file",
            path.display()
        )));
    }
    if !parent.is_dir() {
        return Err(input_error(format!(
            "cannot write {}: directory {} does not exist",
            path.display(),
            parent.display()
        )));
    }
    // Opening is the only real test (root passes access(2) on /proc, where no file can be
    // made). An existing file is opened without truncating; one made here is removed again.
    let existed = path.exists();
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
    {
        Ok(_) if !existed => {
            let _ = std::fs::remove_file(path);
        }
        Ok(_) => {}
        Err(e) => {
            return Err(input_error(format!("cannot write {}: {e}", path.display())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_directory_and_directories_are_refused() {
        let dir = std::env::temp_dir();
        assert!(check_writable(&dir.join("nvarray-output-test.json")).is_ok());
        assert!(check_writable(Path::new("relative-file.json")).is_ok());
        let e = check_writable(&dir.join("no-such-dir-nvarray/x.json")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        assert!(e.downcast_ref::<crate::InputError>().is_some());
        let e = check_writable(&dir).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        // A directory that exists but takes no new files (root may write to /proc itself,
        // but cannot make a file there).
        let e = check_writable(Path::new("/proc/nvarray-output-test.json")).unwrap_err();
        assert!(e.downcast_ref::<crate::InputError>().is_some(), "{e}");
        assert!(!Path::new("/proc/nvarray-output-test.json").exists());
    }
}
