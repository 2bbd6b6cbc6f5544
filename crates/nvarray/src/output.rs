//! Output files named on the command line (`sweep --out`, `pm-bench ycsb --plot`), checked
//! before a long run starts, so a mistyped directory fails at once with exit 2 instead of
//! after every point has run and its results are lost.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use crate::input_error;

/// Refuses `path` as an output file unless its directory exists, is a directory and is
/// writable by this process, and `path` itself is not a directory.
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
    let c_parent = CString::new(parent.as_os_str().as_bytes())
        .map_err(|_| input_error(format!("cannot write {}: NUL in path", path.display())))?;
    // SAFETY: `c_parent` is a valid NUL-terminated string that outlives the call; access(2)
    // only reads it.
    if unsafe { libc::access(c_parent.as_ptr(), libc::W_OK) } != 0 {
        return Err(input_error(format!(
            "cannot write {}: directory {} is not writable ({})",
            path.display(),
            parent.display(),
            std::io::Error::last_os_error()
        )));
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
    }
}
