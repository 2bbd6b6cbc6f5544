//! What identifies a backing file (`Identity`), recorded in its NVM-tier state's header. A
//! plain value: how it is read from a file and recorded on one, and why those three parts,
//! is `file_identity.rs`.

/// What identifies a backing file; recorded in the header of its NVM-tier state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The pool id of the file's extended attribute; 0 where the file system has none.
    pub pool_id: u128,
    pub inode: u64,
    /// Birth time in nanoseconds since the epoch; 0 where the file system does not say.
    pub birth_ns: u64,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pool_id {
            0 => write!(f, "no pool id")?,
            id => write!(f, "pool id {id:032x}")?,
        }
        write!(f, ", inode {}", self.inode)?;
        match self.birth_ns {
            0 => Ok(()),
            ns => write!(
                f,
                ", born at {}.{:09} s",
                ns / 1_000_000_000,
                ns % 1_000_000_000
            ),
        }
    }
}
