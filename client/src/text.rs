//! Text written by other agents (values, reasons, sources, tags), shown one line each.
//!
//! A terminal obeys some characters instead of showing them, and a reader of lines (a
//! person, or a model reading a tool's text) takes a line break for a new line: a value
//! ending in a newline and `[KEY] …` could pose as a note of another key, or as an active
//! note under a revoked one. The CLI's human output and the MCP server's text blocks show
//! such characters as escapes ([`printable`]).

use std::borrow::Cow;
use std::fmt::Write as _;

/// A character a reader may act on instead of seeing: C0 and C1 controls and DEL (ESC
/// starts colour, title and cursor sequences, CR rewrites the line, LF starts a new one),
/// the line and paragraph separators U+2028 and U+2029 (line breaks to Python's
/// `splitlines`, to JavaScript and to many renderers), and the bidirectional embeddings,
/// overrides and isolates, which reorder what is shown.
pub fn is_command_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every [`is_command_char`] character written as a visible escape: `\n`,
/// `\r`, `\t`, else `\u{1b}` (Rust's notation). Text without one is borrowed as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape_command_chars(text, |out, c| {
        let _ = match c {
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            other => write!(out, "\\u{{{:x}}}", u32::from(other)),
        };
    })
}

/// `text` with each [`is_command_char`] character replaced by what `escape` writes.
pub fn escape_command_chars(text: &str, escape: impl Fn(&mut String, char)) -> Cow<'_, str> {
    if !text.chars().any(is_command_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_command_char(c) {
            escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_cannot_command_the_terminal_or_forge_a_line() {
        let value =
            "ok\u{1b}]0;pwned\u{7}\r\nstate: active\tx\u{9b}2J\u{202e}cba\u{2028}[k] a\u{2029}";
        let shown = printable(value);
        assert_eq!(
            shown,
            "ok\\u{1b}]0;pwned\\u{7}\\r\\nstate: active\\tx\\u{9b}2J\\u{202e}cba\\u{2028}[k] a\\u{2029}"
        );
        assert!(!shown.chars().any(is_command_char));
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "[facts/ü] \"postgres\" 16 — ok \\n";
        assert!(matches!(printable(text), Cow::Borrowed(t) if t == text));
    }
}
