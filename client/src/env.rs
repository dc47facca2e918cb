//! The environment the `cairn` CLI and `cairn-mcp` read their defaults from (clap's `env`
//! attributes), and the one rule they share about it: a variable set to the empty string
//! counts as unset, as the token variables do and as the Python client reads them.
//! `CAIRN_ACTOR= cairn write …` then writes with the default actor instead of refusing an
//! empty one.

/// Variables that count as unset when empty. `CAIRN_ENDPOINTS` is not among them: an
/// empty list names no node, and every client refuses it rather than guess.
pub const UNSET_WHEN_EMPTY: [&str; 5] = [
    "CAIRN_ACTOR",
    "CAIRN_CACERT",
    "CAIRN_CERT",
    "CAIRN_KEY",
    "CAIRN_SESSION_FILE",
];

/// Removes from this process's environment each of [`UNSET_WHEN_EMPTY`] that is set to
/// the empty string, so that a parser reading the environment sees it unset.
///
/// Call it first thing in `main`, before any other thread starts: the environment is
/// shared by the whole process and not synchronized.
pub fn unset_empty_variables() {
    for name in UNSET_WHEN_EMPTY {
        if std::env::var_os(name).is_some_and(|value| value.is_empty()) {
            std::env::remove_var(name);
        }
    }
}
