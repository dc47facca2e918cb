//! [`BearerToken`]: the token a client sends as `Authorization: Bearer TOKEN` (SPEC §8).
//!
//! The token is a secret: it is kept as an HTTP header value marked sensitive, its
//! `Debug` output is `BearerToken(<redacted>)`, and no error this module makes quotes it.

use std::path::Path;

use reqwest::header::HeaderValue;

use crate::error::ClientError;

/// Prefix of the tokens a node makes (`cairn_` + base64url of 32 random bytes).
pub const TOKEN_PREFIX: &str = "cairn_";

/// A principal's token, ready to be sent on every request.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    header: HeaderValue,
}

impl BearerToken {
    /// Checks that `token` can travel in a header: not empty, printable ASCII without
    /// spaces. Surrounding whitespace (a file's trailing newline) is dropped. The node
    /// judges everything else (401 `unauthenticated`).
    pub fn new(token: impl AsRef<str>) -> Result<BearerToken, ClientError> {
        let token = token.as_ref().trim();
        if token.is_empty() {
            return Err(ClientError::invalid_input("token: empty"));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ClientError::invalid_input(
                "token: contains a space, a control or a non-ASCII character \
                 (expected cairn_ and base64url)",
            ));
        }
        let mut header = HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|_| ClientError::invalid_input("token: not a valid header value"))?;
        header.set_sensitive(true);
        Ok(BearerToken { header })
    }

    /// The token in `path` (surrounding whitespace dropped). Errors name the file, never
    /// its content.
    pub fn from_file(path: &Path) -> Result<BearerToken, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|e| ClientError::Io {
            message: format!("token file {}: {e}", path.display()),
        })?;
        BearerToken::new(text).map_err(|err| match err {
            ClientError::InvalidInput { message } => ClientError::InvalidInput {
                message: format!("token file {}: {message}", path.display()),
            },
            other => other,
        })
    }

    /// The `Authorization` header value (`Bearer TOKEN`, marked sensitive).
    pub fn header_value(&self) -> HeaderValue {
        self.header.clone()
    }

    /// The token itself, for a caller that must hand it on (e.g. to store it).
    pub fn expose(&self) -> &str {
        let value = self.header.to_str().unwrap_or_default();
        value.strip_prefix("Bearer ").unwrap_or_default()
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "cairn_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA";

    #[test]
    fn debug_and_errors_never_show_the_token() {
        let token = BearerToken::new(format!("{TOKEN}\n")).unwrap();
        assert_eq!(token.expose(), TOKEN);
        assert_eq!(
            token.header_value().to_str().unwrap(),
            format!("Bearer {TOKEN}")
        );
        assert!(token.header_value().is_sensitive());
        let shown = format!("{token:?}");
        assert!(
            !shown.contains(TOKEN) && shown.contains("redacted"),
            "{shown}"
        );
        for bad in [
            String::new(),
            " \n".into(),
            format!("{TOKEN} x"),
            format!("{TOKEN}\u{e9}"),
        ] {
            let err = BearerToken::new(&bad).unwrap_err();
            assert_eq!(err.exit_code(), crate::error::EXIT_INVALID_INPUT);
            assert!(!err.to_string().contains(TOKEN), "{err}");
        }
    }

    #[test]
    fn token_files_are_trimmed_and_never_quoted() {
        let dir = std::env::temp_dir().join(format!("cairn-bearer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
        assert_eq!(BearerToken::from_file(&path).unwrap().expose(), TOKEN);
        std::fs::write(&path, format!("{TOKEN} {TOKEN}\n")).unwrap();
        let err = BearerToken::from_file(&path).unwrap_err();
        assert!(err.to_string().contains("token file"), "{err}");
        assert!(!err.to_string().contains(TOKEN), "{err}");
        let missing = BearerToken::from_file(&dir.join("missing")).unwrap_err();
        assert!(matches!(missing, ClientError::Io { .. }), "{missing:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
