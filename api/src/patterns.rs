//! Patterns the JSON Schema derives (feature `json-schema`) put on request fields: the
//! syntax the node accepts whatever its configured size limits (SPEC §4, §5), so that
//! generated clients, MCP tool callers and the API fuzzer send text the node can take.

/// One line of text: at least one character, none of them a control character (keys,
/// actors, tags, sources, request ids).
pub const LINE: &str = r"^[^\u0000-\u001f\u007f-\u009f]+$";

/// An anchor or a recall cue: `kind:value` with one of the five kinds (SPEC §4).
pub const ANCHOR: &str = r"^(path|symbol|tag|topic|url):[^\u0000-\u001f\u007f-\u009f]+$";

/// A reason: not blank, and no control character but tab and newline.
pub const REASON: &str = r"^[^\u0000-\u0008\u000b-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u0008\u000b-\u001f\u007f-\u009f]*$";
