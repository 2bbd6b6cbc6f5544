//! The kernel's escapes in mount-table fields (`/proc/self/mounts`, `/proc/self/mountinfo`).

/// `field` with the kernel's octal escapes undone: `\040` for a space, `\011` a tab, `\012` a
/// newline, `\134` a backslash (fs/proc_namespace.c escapes exactly these, as three octal
/// digits). A backslash not followed by three octal digits worth one byte stays as it is.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let byte = (field[i] == b'\\')
            .then(|| field.get(i + 1..i + 4))
            .flatten()
            .and_then(octal_byte);
        match byte {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    // An escape is taken only when its three digits are inside the field.
    assert_eq!(i, field.len(), "unescaping stepped past the field's end");
    out
}

/// Three octal digits as the byte they name, if they are octal and name one (≤ `\377`).
fn octal_byte(digits: &[u8]) -> Option<u8> {
    digits
        .iter()
        .try_fold(0u16, |v, &d| {
            (b'0'..=b'7')
                .contains(&d)
                .then(|| v * 8 + u16::from(d - b'0'))
        })
        .and_then(|v| u8::try_from(v).ok())
}

/// `field` unescaped, as text (bytes that are not UTF-8 replaced).
pub fn unescape_text(field: &str) -> String {
    String::from_utf8_lossy(&unescape(field.as_bytes())).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_escapes_come_back_and_anything_else_stays() {
        assert_eq!(unescape_text("a\\040b\\134c\\011d\\012"), "a b\\c\td\n");
        assert_eq!(unescape_text("trailing\\04"), "trailing\\04");
        assert_eq!(unescape_text("\\9999"), "\\9999");
        // Past one byte: left as written rather than wrapped into another byte.
        assert_eq!(unescape_text("\\777"), "\\777");
        assert_eq!(unescape(b"\\377"), [0xff]);
    }
}
