//! Output primitives: one line to stdout, `--json`, aligned `key: value` fields and
//! tables. What each response looks like is in [`crate::render`].
//!
//! Values, reasons, sources and tags are written by other agents, so nothing printed may
//! command the terminal: every line goes through [`printable`] and every JSON document
//! through [`to_json`], which escape the characters a terminal obeys instead of showing
//! ([`cairn_client::text`]).

use std::borrow::Cow;
use std::fmt::{Display, Write as _};
use std::io::Write;
use std::process::ExitCode;
use std::sync::OnceLock;

use serde::Serialize;
use serde_json::Value;

use cairn_client::error::EXIT_OTHER;
use cairn_client::text::{escape_command_chars, printable};
use cairn_client::ClientError;

use crate::{Ctx, Result};

impl Ctx {
    /// Prints `value` as JSON with `--json`, else in its human form `human`.
    pub fn emit<T: Serialize>(&self, value: &T, human: fn(&T)) -> Result<()> {
        if self.json {
            say(to_json(value)?);
        } else {
            human(value);
        }
        stdout_failed()
    }
}

/// Compact JSON in which a terminal command character is a `\uXXXX` escape: serde_json
/// escapes C0 controls itself but writes DEL, C1 controls and bidirectional overrides as
/// they are. Outside strings serde_json writes only ASCII punctuation, digits and
/// literals, so every such character is inside a string, where the escape means the same.
pub fn to_json(value: &impl Serialize) -> Result<String> {
    let json = serde_json::to_string(value).map_err(|e| ClientError::Decode {
        message: format!("print JSON: {e}"),
    })?;
    Ok(escape_command_chars(&json, |out, c| {
        let _ = write!(out, "\\u{:04x}", u32::from(c));
    })
    .into_owned())
}

/// The first failure to write stdout. Output stops there, and the command ends as soon as
/// it next emits an answer; the program still saves its session file (a mutation that was
/// applied is in it even when its answer could not be printed) before it exits.
static STDOUT_FAILURE: OnceLock<std::io::Error> = OnceLock::new();

/// One line to stdout, through [`printable`]; nothing once stdout failed (a closed pipe,
/// `cairn list | head`, or a full disk), instead of panicking like `println!`.
pub fn say(line: impl Display) {
    if STDOUT_FAILURE.get().is_some() {
        return;
    }
    let line = line.to_string();
    let mut out = std::io::stdout().lock();
    if let Err(err) = writeln!(out, "{}", printable(&line)) {
        let _ = STDOUT_FAILURE.set(err);
    }
}

/// How a failure to write stdout ends the program, if there was one: a closed pipe quietly
/// (exit 0: the reader has what it wanted), anything else as an I/O error.
pub fn stdout_exit() -> Option<ExitCode> {
    let err = STDOUT_FAILURE.get()?;
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        return Some(ExitCode::SUCCESS);
    }
    eprintln!("error: io: stdout: {err}");
    Some(ExitCode::from(EXIT_OTHER))
}

/// An error that ends the command once stdout failed ([`stdout_exit`] says how it ends).
fn stdout_failed() -> Result<()> {
    match STDOUT_FAILURE.get() {
        Some(err) => Err(ClientError::Io {
            message: format!("stdout: {err}"),
        }),
        None => Ok(()),
    }
}

/// The error on stderr: `error: CODE: MESSAGE`, or with `--json` the node's error object
/// `{"error": {"code", "message", …details}}` on one line, so a script reads the code and
/// details (`op_index`, `current_version`, `request_id`, …) without parsing prose.
pub fn report_error(err: &ClientError, json: bool) {
    let line = match json {
        true => to_json(&err.to_json()).unwrap_or_else(|_| err.to_string()),
        false => format!("error: {err}"),
    };
    eprintln!("{}", printable(&line));
}

/// `key: value` lines with the values aligned.
pub fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(name, _)| name.len()).max().unwrap_or(0) + 1;
    for (name, value) in fields {
        let line = format!("{:<width$} {}", format!("{name}:"), printable(value));
        say(line.trim_end());
    }
}

/// A table with a header row; columns padded to their widest cell. A row shorter than the
/// header (an error message) does not widen the columns: its last cell runs on.
pub fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|row| {
            row.iter()
                .map(|cell| printable(cell).into_owned())
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows.iter().filter(|row| row.len() == headers.len()) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        say(cells.join("  ").trim_end());
    }
}

/// `text` as one shell word, for a line meant to be pasted into a shell: as it is when no
/// shell gives any of its characters a meaning, else in POSIX single quotes (a `'` inside
/// them as `'\''`).
pub fn shell_word(text: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:,+@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("'{}'", text.replace('\'', r"'\''")))
}

/// The wire name of an enum (`tombstone_cleared`, …).
pub fn wire_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        other => format!("{other:?}"),
    }
}

pub fn joined<T: Display>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_a_shell_would_read_them_otherwise() {
        assert_eq!(shell_word("todo/1"), "todo/1");
        assert_eq!(shell_word("b,c:d@e%f+g-h_i.j"), "b,c:d@e%f+g-h_i.j");
        assert_eq!(
            shell_word("=x"),
            "'=x'",
            "zsh expands a word that starts with ="
        );
        assert_eq!(shell_word("odd/a "), "'odd/a '");
        assert_eq!(shell_word("it's $HOME"), r"'it'\''s $HOME'");
        assert_eq!(shell_word("~/x*"), "'~/x*'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn json_escapes_what_serde_leaves_raw_and_still_decodes_to_the_same_value() {
        let value = serde_json::json!({"v": "a\u{7f}b\u{85}c\u{2066}d\u{1b}e", "k\u{9b}": 1});
        let json = to_json(&value).unwrap();
        assert!(
            !json.chars().any(cairn_client::text::is_command_char),
            "{json}"
        );
        assert!(
            json.contains("\\u007f") && json.contains("\\u0085"),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), value);
    }
}
