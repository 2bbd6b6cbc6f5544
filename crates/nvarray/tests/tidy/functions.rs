//! The functions of a source file and their lengths, for the rule that none is over 70 lines
//! (issue 62).

use crate::module_graph::{code_only, matching_brace, test_module_spans};

/// A function with a body: its name, the line its `fn` is on (from 1) and its length in lines,
/// from that line to its closing brace.
#[derive(Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

/// Every function with a body in `text` outside its test modules (nested ones too).
pub fn functions(text: &str) -> Vec<Function> {
    let code = code_only(text);
    let (tests, _) = test_module_spans(&code);
    let bytes = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn ") {
        let at = from + found;
        from = at + 3;
        if at > 0 && is_ident(bytes[at - 1]) || tests.iter().any(|t| t.contains(&at)) {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|&c| c.is_alphanumeric() || c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(u64) -> u64`, a pointer type
        }
        // The body opens at the first `{` before any `;` (a declaration without a body).
        let Some(open) = code[at..].find(['{', ';']).map(|i| at + i) else {
            continue;
        };
        if bytes[open] == b';' {
            continue;
        }
        let end = matching_brace(&code, open);
        let line = code[..at].matches('\n').count() + 1;
        let lines = code[at..end].matches('\n').count() + 1;
        out.push(Function { name, line, lines });
    }
    out
}
