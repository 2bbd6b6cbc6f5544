//! The states in an NVM directory by name and by header: which files are states, and which
//! state was made for a given file under whatever path (`pool.rs` takes over a renamed pool's
//! state; `state_files.rs` lists them).

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::file_identity;
use crate::identity::Identity;
use crate::layout;

/// Whether `name` is the name of a state file (`pool::nvm_file_path`).
pub(crate) fn is_state_name(name: &str) -> bool {
    name.strip_prefix("nvarray-pm-")
        .and_then(|r| r.strip_suffix(".nvm"))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The state in `nvm_dir` (other than `except`) made for the file whose identity is `wanted`,
/// under whatever path: the file was renamed, or is reached through another hard link, since.
/// Of several (superseded ones left behind), the newest generation. Reads headers only; a
/// state that cannot be read is skipped (the caller makes a new one, and `pm list` names it).
pub(crate) fn state_of(nvm_dir: &Path, wanted: &Identity, except: &Path) -> Option<PathBuf> {
    if !file_identity::is_distinctive(wanted) {
        return None;
    }
    let entries = std::fs::read_dir(nvm_dir).ok()?;
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(is_state_name))
        .map(|e| e.path())
        .filter(|p| p != except)
        .filter_map(|p| {
            let (identity, generation) = header_identity(&p)?;
            (identity == *wanted).then_some((generation, p))
        })
        .max()
        .map(|(_, p)| p)
}

/// The identity and generation a state's header records, read with one `pread` (no mapping,
/// no lock: both are written before the state gets its name and never change). None for
/// anything that is not a readable state of this version.
fn header_identity(path: &Path) -> Option<(Identity, u64)> {
    use std::os::unix::fs::FileExt as _;
    let file = File::open(path).ok()?;
    let mut head = [0u8; layout::H_IDENTITY_END];
    file.read_exact_at(&mut head, 0).ok()?;
    let word = |off: usize| u64::from_le_bytes(head[off..off + 8].try_into().expect("8 bytes"));
    if &head[layout::H_MAGIC..layout::H_MAGIC + 8] != layout::MAGIC
        || word(layout::H_VERSION) != layout::VERSION as u64
    {
        return None;
    }
    let pool_id = u128::from_le_bytes(
        head[layout::H_IDENTITY..layout::H_IDENTITY + 16]
            .try_into()
            .expect("16 bytes"),
    );
    let identity = Identity {
        pool_id,
        inode: word(layout::H_IDENTITY + 16),
        birth_ns: word(layout::H_IDENTITY + 24),
    };
    Some((identity, word(layout::H_GENERATION)))
}
