//! A command line quoted for a POSIX shell.

/// Characters a shell reads as themselves wherever they are in a word.
const PLAIN: &str = "-_./=:,%+@";

/// `word` as a shell must be given it to read it back unchanged: as it is when every
/// character is plain, otherwise in single quotes (a `'` inside written `'\''`).
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || PLAIN.contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `words` quoted (`quote`) and joined by spaces.
pub fn join<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_and_others_are_quoted_so_the_shell_reads_them_back() {
        assert_eq!(quote("--size=4k"), "--size=4k");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(join(&["fio", "--name=a b"]), "fio '--name=a b'");
    }

    #[test]
    fn the_shell_reads_every_quoted_word_back_unchanged() {
        let words = [
            "plain",
            "",
            "a b",
            "it's",
            "$x",
            "tab\there",
            "\\back",
            "'",
            "*",
        ];
        let line = format!("printf '%s\\n' {}", join(&words));
        let out = std::process::Command::new("sh")
            .args(["-c", &line])
            .output()
            .unwrap();
        let expected: String = words.iter().map(|w| format!("{w}\n")).collect();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    }
}
