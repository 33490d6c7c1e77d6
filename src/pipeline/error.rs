//! [`SpecError`]: a located problem in a pipeline or role file.
//!
//! Every parse and validation error names `file:line:column` (1-based, in
//! characters, relative to the whole file) and says what was expected.

use serde_saphyr::{DefaultMessageFormatter, Location, MessageFormatter};
use std::fmt;

/// A problem in a pipeline or role file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The file (a path, or `built-in …` for files compiled into the binary).
    pub file: String,
    /// 1-based line; 0 only when the parser could not tell.
    pub line: u64,
    /// 1-based column in characters; 0 only when the parser could not tell.
    pub column: u64,
    /// What is wrong and what is expected, as a lowercase fragment.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

impl std::error::Error for SpecError {}

impl SpecError {
    /// An error at an explicit position.
    pub fn new(file: &str, line: u64, column: u64, message: impl Into<String>) -> Self {
        SpecError {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }

    /// An error at a parser location, shifted down by `line_offset` lines
    /// (for YAML embedded in a larger file, such as role front matter).
    pub(crate) fn at(
        file: &str,
        location: &Location,
        line_offset: u64,
        message: impl Into<String>,
    ) -> Self {
        Self::new(
            file,
            location.line() + line_offset,
            location.column(),
            message,
        )
    }

    /// Converts a serde-saphyr error, keeping its location but not its
    /// rendered snippet (the message reads after `file:line:column:`).
    pub(crate) fn from_yaml(file: &str, err: &serde_saphyr::Error, line_offset: u64) -> Self {
        let err = err.without_snippet();
        let message = match err {
            serde_saphyr::Error::DuplicateMappingKey { key: Some(key), .. } => {
                format!(
                    "duplicate key `{key}`: each key, and so each stage id, may appear only once"
                )
            }
            serde_saphyr::Error::InvalidScalar { ty, .. } => {
                format!("invalid value: expected {}", describe_scalar(ty))
            }
            // The formatter's text may carry control characters from the
            // input; keep the message on one line.
            other => DefaultMessageFormatter
                .format_message(other)
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect(),
        };
        match err.location() {
            Some(location) => Self::at(file, &location, line_offset, message),
            None => Self::new(file, 0, 0, message),
        }
    }
}

/// What a user should write for a scalar of Rust type `ty`.
fn describe_scalar(ty: &str) -> String {
    match ty {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".to_owned(),
        "f32" | "f64" | "floating point" => "a number".to_owned(),
        "bool" => "true or false".to_owned(),
        other => format!("a value of type {other}"),
    }
}
