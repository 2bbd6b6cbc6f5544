//! Errors in what the user gave (flags, files, values): the CLI's `main` exits with status 2 for them.

/// An error in what the user gave us (flags, files, values): exit status 2.
#[derive(Debug)]
pub struct InputError(pub String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// Wraps anything displayable as an input error.
pub fn input_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(InputError(e.to_string()))
}
