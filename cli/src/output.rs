//! Output primitives: one line to stdout, `--json`, aligned `key: value` fields and
//! tables. What each response looks like is in [`crate::render`].

use std::fmt::Display;
use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use cairn_client::error::EXIT_OTHER;
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
        Ok(())
    }
}

pub fn to_json(value: &impl Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(|e| ClientError::Decode {
        message: format!("print JSON: {e}"),
    })
}

/// One line to stdout; a closed pipe (`cairn list | head`) ends the program quietly
/// instead of panicking like `println!`.
pub fn say(line: impl Display) {
    let mut out = std::io::stdout().lock();
    if let Err(err) = writeln!(out, "{line}") {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: io: stdout: {err}");
        std::process::exit(i32::from(EXIT_OTHER));
    }
}

/// `key: value` lines with the values aligned.
pub fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(name, _)| name.len()).max().unwrap_or(0) + 1;
    for (name, value) in fields {
        let line = format!("{:<width$} {value}", format!("{name}:"));
        say(line.trim_end());
    }
}

/// A table with a header row; columns padded to their widest cell. A row shorter than the
/// header (an error message) does not widen the columns: its last cell runs on.
pub fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
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
