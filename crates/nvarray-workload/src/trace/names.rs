//! Names and text in a trace's flags and messages: a flag's value looked up by name, and
//! text from a trace shown so every character can be seen.

use std::borrow::Cow;

/// The value named `name` (any case) in a `--trace-*` flag's table of names.
pub(crate) fn by_name<T: Copy>(all: &[(&str, T)], name: &str) -> Option<T> {
    all.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, v)| v)
}

/// `text` with control and invisible characters escaped (`\u{feff}`, `\t`), so an error
/// or a report never shows a character the reader cannot see. Quotes and backslashes are
/// left as they are: the text is quoted by the message around it.
pub fn shown(text: &str) -> Cow<'_, str> {
    let plain = |c: char| matches!(c, '\'' | '"' | '\\') || c.escape_debug().len() == 1;
    if text.chars().all(plain) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if plain(c) {
                    c.to_string()
                } else {
                    c.escape_debug().to_string()
                }
            })
            .collect(),
    )
}
