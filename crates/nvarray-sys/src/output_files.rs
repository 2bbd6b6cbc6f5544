//! Output files named on the command line (`sweep --out`, `pm-bench ycsb --plot`), checked
//! before a long run starts (their directory made if missing), so an output that cannot be
//! written fails at once with exit 2 instead of after every point has run and its results
//! are lost.

use std::path::Path;

use crate::input::input_error;

/// Refuses `path` as an output file unless it can be opened for writing there and is not a
/// directory. Makes its directory, and the ones above, if they do not exist (`--out
/// runs/v1.1` with no `runs/` yet), as `mkdir -p` would. Leaves no file behind.
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
    if !parent.exists() {
        std::fs::create_dir_all(parent).map_err(|e| {
            input_error(format!(
                "cannot write {}: cannot make its directory {}: {e}",
                path.display(),
                parent.display()
            ))
        })?;
    }
    if !parent.is_dir() {
        return Err(input_error(format!(
            "cannot write {}: {} is not a directory",
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

/// An output file named after `stem`: `stem` with `.ext` added, so `--out dot/v1.1` writes
/// `dot/v1.1.jsonl` and `dot/v1.2` another file (`Path::with_extension` would replace the `.1`
/// and `.2`, and the second run would overwrite the first's files). A stem that already ends
/// in one of `own`, the extensions of the files written together, loses it first: `--out
/// r.json` names the set `r.jsonl`, `r.json`, `r.svg`, not `r.json.json`.
pub fn sibling(stem: &Path, ext: &str, own: &[&str]) -> std::path::PathBuf {
    let mut name = stem.as_os_str().to_owned();
    if let Some(e) = stem.extension().and_then(|e| e.to_str()) {
        if own.contains(&e) {
            name = stem.with_extension("").into_os_string();
        }
    }
    name.push(".");
    name.push(ext);
    name.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_keep_every_dot_of_the_stem() {
        let own = ["jsonl", "json", "svg"];
        for (stem, ext, expected) in [
            ("dot/v1.1", "jsonl", "dot/v1.1.jsonl"),
            ("dot/v1.2", "json", "dot/v1.2.json"),
            ("sweep", "svg", "sweep.svg"),
            ("run.2024-01-02", "json", "run.2024-01-02.json"),
            ("r.json", "jsonl", "r.jsonl"),
            ("r.jsonl", "svg", "r.svg"),
            ("a.b/c", "json", "a.b/c.json"),
        ] {
            assert_eq!(
                sibling(Path::new(stem), ext, &own),
                Path::new(expected),
                "{stem}"
            );
        }
    }

    #[test]
    fn missing_directories_are_made_and_directories_refused() {
        let dir = std::env::temp_dir();
        assert!(check_writable(&dir.join("nvarray-output-test.json")).is_ok());
        assert!(check_writable(Path::new("relative-file.json")).is_ok());
        let made = dir.join(format!("nvarray-output-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&made);
        check_writable(&made.join("runs/v1.1.jsonl")).unwrap();
        assert!(made.join("runs").is_dir());
        assert!(
            !made.join("runs/v1.1.jsonl").exists(),
            "no file left behind"
        );
        std::fs::remove_dir_all(&made).unwrap();
        // A file where a directory is needed cannot be made one.
        let file = dir.join(format!("nvarray-output-file-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let e = check_writable(&file.join("x.json")).unwrap_err();
        assert!(
            e.downcast_ref::<crate::input::InputError>().is_some(),
            "{e}"
        );
        std::fs::remove_file(&file).unwrap();
        let e = check_writable(&dir).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        // A directory that exists but takes no new files (root may write to /proc itself,
        // but cannot make a file there).
        let e = check_writable(Path::new("/proc/nvarray-output-test.json")).unwrap_err();
        assert!(
            e.downcast_ref::<crate::input::InputError>().is_some(),
            "{e}"
        );
        assert!(!Path::new("/proc/nvarray-output-test.json").exists());
    }
}
