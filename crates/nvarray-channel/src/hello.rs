//! The two messages on a channel's socket before its shared memory takes over: the client's
//! `Hello` (what it asks for) and the daemon's `Reply` (the memfd attached, or why not).
//! Fixed sizes, little-endian; anything else is refused.

use crate::layout::VERSION;

const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"NVAHELLO");
const REPLY_MAGIC: u64 = u64::from_le_bytes(*b"NVAREPLY");
pub const HELLO_BYTES: usize = 24;
pub const REPLY_BYTES: usize = 128;
const MESSAGE_BYTES: usize = REPLY_BYTES - 16;
// `Hello::encode` lays out magic, version, queue depth and region size, nothing more.
const _: () = assert!(HELLO_BYTES == 8 + 4 + 4 + 8);

/// What a client asks for: 0 means the daemon's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    pub queue_depth: u32,
    pub buffer_bytes: u64,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[..8].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.queue_depth.to_le_bytes());
        b[16..].copy_from_slice(&self.buffer_bytes.to_le_bytes());
        b
    }

    /// `None` for anything but a whole hello (any version: the daemon answers a wrong one).
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != HELLO_BYTES || b[..8] != HELLO_MAGIC.to_le_bytes() {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Some(Hello {
            version: u32_at(8),
            queue_depth: u32_at(12),
            buffer_bytes: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        })
    }
}

/// The daemon's answer: `errno` 0 with the channel's memfd attached, or a positive errno and
/// a message saying why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub errno: i32,
    pub message: String,
}

impl Reply {
    pub fn encode(&self) -> [u8; REPLY_BYTES] {
        let mut b = [0u8; REPLY_BYTES];
        b[..8].copy_from_slice(&REPLY_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.errno.to_le_bytes());
        // Cut at a character boundary so the message stays UTF-8.
        let mut n = self.message.len().min(MESSAGE_BYTES);
        while !self.message.is_char_boundary(n) {
            n -= 1;
        }
        b[16..16 + n].copy_from_slice(&self.message.as_bytes()[..n]);
        b
    }

    pub fn decode(b: &[u8]) -> Option<Reply> {
        if b.len() != REPLY_BYTES || b[..8] != REPLY_MAGIC.to_le_bytes() {
            return None;
        }
        let errno = i32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        let text = &b[16..];
        let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
        Some(Reply {
            errno,
            message: String::from_utf8_lossy(&text[..end]).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_refuse_other_bytes() {
        let h = Hello {
            version: 7,
            queue_depth: 16,
            buffer_bytes: 1 << 20,
        };
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        assert_eq!(Hello::decode(&h.encode()[..23]), None);
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert_eq!(Hello::decode(&bad), None);
        let long = Reply {
            errno: 13,
            message: "é".repeat(100),
        };
        let back = Reply::decode(&long.encode()).expect("a reply");
        assert_eq!(back.errno, 13);
        assert!(long.message.starts_with(&back.message) && back.message.len() <= MESSAGE_BYTES);
        assert_eq!(Reply::decode(&[0u8; REPLY_BYTES]), None);
    }
}
