//! How densely a source file states its invariants, for the rule that every crate asserts at
//! least once per 100 lines of code (issue 62).

use crate::module_graph::{code_only, test_module_spans};

/// The macros that state an invariant and panic when it is false.
const ASSERTIONS: [&str; 6] = [
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
];

/// A file's code outside its test modules: lines with code on them (not blank, not only a
/// comment) and the assertions among them.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct Density {
    pub lines: usize,
    pub assertions: usize,
}

impl std::ops::AddAssign for Density {
    fn add_assign(&mut self, other: Density) {
        self.lines += other.lines;
        self.assertions += other.assertions;
    }
}

/// The code lines and assertions of `text` outside its test modules.
pub fn density(text: &str) -> Density {
    let code = code_only(text);
    let (tests, _) = test_module_spans(&code);
    let mut kept = code.into_bytes();
    for span in tests {
        for b in &mut kept[span] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    let kept = String::from_utf8_lossy(&kept);
    let lines = kept.lines().filter(|l| !l.trim().is_empty()).count();
    let bytes = kept.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut assertions = 0;
    let mut at = 0;
    while at < bytes.len() {
        if !is_ident(bytes[at]) || (at > 0 && is_ident(bytes[at - 1])) {
            at += 1;
            continue;
        }
        let end = (at..bytes.len())
            .find(|&i| !is_ident(bytes[i]))
            .unwrap_or(bytes.len());
        if bytes.get(end) == Some(&b'!') && ASSERTIONS.contains(&&kept[at..end]) {
            assertions += 1;
        }
        at = end;
    }
    Density { lines, assertions }
}
