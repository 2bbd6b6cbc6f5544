//! Who may touch which bytes: the daemon's table of named extents, each granted to one user
//! (or all) for reading, writing or both, and a channel's view of it (`Extents`), which the
//! device checks every command against before it touches data, as Moneta-D's hardware checked
//! each request against the permission entries the kernel installed (Caulfield et al.,
//! ASPLOS'12).
//!
//! A grant is written `NAME:OFFSET:LEN:MODE:UID`, e.g. `db:0:1g:rw:1000`: sizes take
//! nvarray's suffixes (`4k`, `1g`), MODE is `r`, `w` or `rw`, UID a number or `*` for every
//! user. A grants file holds one per line (`#` starts a comment).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One named extent granted to a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub name: String,
    pub offset: u64,
    pub len: u64,
    pub read: bool,
    pub write: bool,
    /// `None`: every user.
    pub uid: Option<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("grant {text:?}: {why} (expected NAME:OFFSET:LEN:MODE:UID, e.g. db:0:1g:rw:1000)")]
pub struct GrantError {
    pub text: String,
    pub why: String,
}

impl std::str::FromStr for Grant {
    type Err = GrantError;

    fn from_str(text: &str) -> Result<Grant, GrantError> {
        let fail = |why: String| GrantError {
            text: text.to_string(),
            why,
        };
        let parts: Vec<&str> = text.trim().split(':').collect();
        let [name, offset, len, mode, uid] = parts[..] else {
            return Err(fail(format!("{} fields, not 5", parts.len())));
        };
        if name.is_empty() {
            return Err(fail("the name is empty".into()));
        }
        let size = |what: &str, s: &str| {
            nvarray_units::parse_size(s).map_err(|e| fail(format!("{what}: {e}")))
        };
        let (offset, len) = (size("OFFSET", offset)?, size("LEN", len)?);
        if len == 0 {
            return Err(fail("LEN is 0".into()));
        }
        if offset.checked_add(len).is_none() {
            return Err(fail("OFFSET + LEN is past 2^64".into()));
        }
        let (read, write) = match mode {
            "r" => (true, false),
            "w" => (false, true),
            "rw" | "wr" => (true, true),
            other => return Err(fail(format!("MODE {other:?} is not r, w or rw"))),
        };
        let uid = match uid {
            "*" => None,
            n => Some(
                n.parse()
                    .map_err(|_| fail(format!("UID {n:?} is not a number or *")))?,
            ),
        };
        Ok(Grant {
            name: name.to_string(),
            offset,
            len,
            read,
            write,
            uid,
        })
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match (self.read, self.write) {
            (true, true) => "rw",
            (true, false) => "r",
            _ => "w",
        };
        let uid = self.uid.map_or("*".to_string(), |u| u.to_string());
        write!(f, "{}:{}:{}:{mode}:{uid}", self.name, self.offset, self.len)
    }
}

impl Grant {
    pub fn covers(&self, uid: u32) -> bool {
        self.uid.is_none_or(|u| u == uid)
    }
}

/// Parses a grants file: one grant per line, blank lines and `#` comments skipped. The error
/// names the line.
pub fn parse_grants(text: &str) -> Result<Vec<Grant>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        out.push(line.parse().map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(out)
}

/// A grant that runs past the device's end, named; `None` when all fit. A grant built in code
/// whose end overflows 64 bits runs past it too.
pub fn past_device(grants: &[Grant], size_bytes: u64) -> Option<&Grant> {
    grants
        .iter()
        .find(|g| g.offset.saturating_add(g.len) > size_bytes)
}

/// The extents one user may read and write, each list sorted and merged, so a command that
/// spans two adjacent grants is allowed and a check is a short scan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extents {
    read: Vec<(u64, u64)>,
    write: Vec<(u64, u64)>,
}

impl Extents {
    pub fn for_uid(grants: &[Grant], uid: u32) -> Extents {
        let merged = |want: fn(&Grant) -> bool| {
            let mut v: Vec<(u64, u64)> = grants
                .iter()
                .filter(|g| g.covers(uid) && want(g))
                .map(|g| (g.offset, g.offset.saturating_add(g.len)))
                .collect();
            v.sort_unstable();
            let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
            for (s, e) in v {
                match out.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => out.push((s, e)),
                }
            }
            // `allows` searches on this: sorted, and disjoint with a gap between neighbours
            // (touching extents were merged).
            assert!(
                out.windows(2).all(|w| w[0].1 < w[1].0),
                "extents not sorted and merged: {out:?}"
            );
            out
        };
        Extents {
            read: merged(|g| g.read),
            write: merged(|g| g.write),
        }
    }

    /// Whether nothing at all is granted.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty() && self.write.is_empty()
    }

    /// Whether `[offset, offset + len)` lies inside one extent granted for this direction.
    #[inline]
    pub fn allows(&self, write: bool, offset: u64, len: u64) -> bool {
        let Some(end) = offset.checked_add(len) else {
            return false;
        };
        let list = if write { &self.write } else { &self.read };
        // Merged extents are disjoint and sorted: the only one that can hold the range is
        // the last to start at or before it (a binary search, so many grants cost little).
        let i = list.partition_point(|&(s, _)| s <= offset);
        i > 0 && end <= list[i - 1].1
    }
}

/// The daemon's grants, replaceable while channels run: a replacement takes effect before any
/// channel's next command (each compares `generation` at every pass that takes commands).
#[derive(Debug, Default)]
pub struct GrantTable {
    generation: AtomicU64,
    grants: Mutex<Vec<Grant>>,
}

impl GrantTable {
    pub fn new(grants: Vec<Grant>) -> GrantTable {
        GrantTable {
            generation: AtomicU64::new(1),
            grants: Mutex::new(grants),
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces every grant. When this returns, no channel takes another command under the
    /// old ones.
    pub fn replace(&self, grants: Vec<Grant>) {
        let mut g = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        *g = grants;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The user's extents now, with the generation they belong to.
    pub fn extents(&self, uid: u32) -> (u64, Extents) {
        let g = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        (self.generation(), Extents::for_uid(&g, uid))
    }

    pub fn list(&self) -> Vec<Grant> {
        self.grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_whose_end_overflows_is_past_the_device() {
        let g = Grant {
            name: "wraps".into(),
            offset: u64::MAX - 10,
            len: 100,
            read: true,
            write: true,
            uid: None,
        };
        assert_eq!(past_device(std::slice::from_ref(&g), 1 << 30), Some(&g));
    }

    #[test]
    fn grants_parse_and_refuse_with_the_reason() {
        let g: Grant = "db:4k:1m:rw:1000".parse().expect("valid");
        assert_eq!(
            (g.offset, g.len, g.read, g.write, g.uid),
            (4096, 1 << 20, true, true, Some(1000))
        );
        assert_eq!(g.to_string().parse::<Grant>(), Ok(g));
        for (bad, why) in [
            ("db:0:1m:rw", "4 fields"),
            (":0:1m:rw:1", "name is empty"),
            ("db:0:0:rw:1", "LEN is 0"),
            ("db:0:1m:x:1", "MODE"),
            ("db:0:1m:r:me", "UID"),
            ("db:zz:1m:r:1", "OFFSET"),
        ] {
            let e = bad.parse::<Grant>().expect_err(bad);
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        let e = parse_grants("# ok\na:0:4k:r:*\n\nb:0:4k:q:*\n").expect_err("line 4");
        assert!(e.starts_with("line 4:"), "{e}");
    }

    #[test]
    fn extents_merge_per_user_and_direction() {
        let grants = parse_grants("a:0:4k:rw:1\nb:4k:4k:rw:1\nc:64k:4k:r:*\nd:1m:4k:rw:2").unwrap();
        let e = Extents::for_uid(&grants, 1);
        assert!(e.allows(true, 0, 8192), "adjacent grants merge");
        assert!(!e.allows(true, 4096, 8192), "past the merged extent");
        assert!(e.allows(false, 65536, 4096) && !e.allows(true, 65536, 4096));
        assert!(!e.allows(false, 1 << 20, 4096), "another user's");
        assert!(!e.allows(false, u64::MAX, 2), "wrapping range");
        assert!(Extents::for_uid(&grants, 3).allows(false, 65536, 512));
        assert!(Extents::for_uid(&[], 3).is_empty());
    }

    #[test]
    fn a_replacement_moves_the_generation() {
        let t = GrantTable::new(parse_grants("a:0:4k:rw:1").unwrap());
        let (g1, e1) = t.extents(1);
        assert!(e1.allows(true, 0, 4096));
        t.replace(Vec::new());
        let (g2, e2) = t.extents(1);
        assert!(g2 > g1 && e2.is_empty());
    }
}
