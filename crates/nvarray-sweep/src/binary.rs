//! Which nvarray binary ran a sweep: finer than the version string, which stays the same
//! across every build of a release while the code (and so the numbers) change.
//!
//! The linker's GNU build id (`.note.gnu.build-id`, a hash of the linked program) names one
//! build: the same binary copied to every node of a cluster has one id, two builds of
//! different code have two. It is read from this program's own file (`/proc/self/exe`),
//! only its ELF headers and notes. A binary linked without one is named by a hash of its
//! bytes instead.

use std::io::{Read, Seek, SeekFrom};
use std::sync::OnceLock;

use super::fnv::Fnv;

/// The id of the running binary: `build-id:HEX`, or `fnv:HEX` of its bytes, or `unknown`
/// when its file cannot be read (the identity is then as coarse as the version string).
pub fn id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let Ok(mut exe) = std::fs::File::open("/proc/self/exe") else {
            return "unknown".to_string();
        };
        if let Some(build_id) = gnu_build_id(&mut exe) {
            return format!("build-id:{}", hex(&build_id));
        }
        let mut h = Fnv::default();
        let mut buf = vec![0u8; 1 << 20];
        if exe.seek(SeekFrom::Start(0)).is_err() {
            return "unknown".to_string();
        }
        loop {
            match exe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => h.write_raw(&buf[..n]),
                Err(_) => return "unknown".to_string(),
            }
        }
        format!("fnv:{:016x}", h.value())
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Most bytes of note segments read, and most notes looked at: a bound on what a damaged or
/// unusual file can make this read.
const NOTES_BYTES_MAX: u64 = 1 << 20;
const PROGRAM_HEADERS_MAX: u16 = 4096;

/// The GNU build id of a 64-bit little-endian ELF file (x86-64, aarch64), from its PT_NOTE
/// segments; `None` for any other file or when it has none.
pub fn gnu_build_id(file: &mut (impl Read + Seek)) -> Option<Vec<u8>> {
    let mut header = [0u8; 64];
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_exact(&mut header).ok()?;
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let phoff = u64_at(&header, 32);
    let phentsize = usize::from(u16_at(&header, 54));
    let phnum = u16_at(&header, 56);
    if phentsize < 56 || phnum > PROGRAM_HEADERS_MAX {
        return None;
    }
    let mut headers = vec![0u8; phentsize * usize::from(phnum)];
    file.seek(SeekFrom::Start(phoff)).ok()?;
    file.read_exact(&mut headers).ok()?;
    const PT_NOTE: u32 = 4;
    const NT_GNU_BUILD_ID: u32 = 3;
    for ph in headers.chunks_exact(phentsize) {
        if u32_at(ph, 0) != PT_NOTE {
            continue;
        }
        let (offset, size) = (u64_at(ph, 8), u64_at(ph, 32));
        if size > NOTES_BYTES_MAX {
            continue;
        }
        let mut notes = vec![0u8; usize::try_from(size).ok()?];
        file.seek(SeekFrom::Start(offset)).ok()?;
        file.read_exact(&mut notes).ok()?;
        // Each note: name size, descriptor size, type, then the name and the descriptor,
        // each padded to 4 bytes.
        let mut at = 0usize;
        while at + 12 <= notes.len() {
            let name_bytes = usize::try_from(u32_at(&notes, at)).ok()?;
            let desc_bytes = usize::try_from(u32_at(&notes, at + 4)).ok()?;
            let kind = u32_at(&notes, at + 8);
            let name_at = at + 12;
            let desc_at = name_at.checked_add(name_bytes.checked_next_multiple_of(4)?)?;
            let end = desc_at.checked_add(desc_bytes.checked_next_multiple_of(4)?)?;
            if end > notes.len() {
                break;
            }
            // Padding rounds each part up, so both lie inside the note.
            debug_assert!(
                name_at + name_bytes <= desc_at,
                "note name past its descriptor"
            );
            debug_assert!(desc_at + desc_bytes <= end, "note descriptor past its end");
            if kind == NT_GNU_BUILD_ID && notes[name_at..name_at + name_bytes] == *b"GNU\0" {
                return Some(notes[desc_at..desc_at + desc_bytes].to_vec());
            }
            at = end;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_binary_has_a_stable_id() {
        let first = id();
        assert!(
            first.starts_with("build-id:") || first.starts_with("fnv:"),
            "{first}"
        );
        assert_eq!(first, id());
    }

    #[test]
    fn other_files_have_no_build_id() {
        for bytes in [
            &b""[..],
            b"not an ELF file at all, just text",
            &[0x7f, b'E', b'L', b'F', 1, 1],
        ] {
            assert_eq!(gnu_build_id(&mut std::io::Cursor::new(bytes)), None);
        }
    }
}
