//! Tokens: `cairn_` + base64url(32 random bytes), shown once; nodes keep the sha256.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What every token starts with, so a leaked one is recognizable (secret scanners).
pub const TOKEN_PREFIX: &str = "cairn_";
/// Random bytes in a token.
pub const TOKEN_BYTES: usize = 32;
/// Length of the base64url (unpadded) text of [`TOKEN_BYTES`] bytes.
const TOKEN_TEXT_LEN: usize = (TOKEN_BYTES * 4).div_ceil(3);
/// Longest `Authorization` value looked at; anything longer is malformed, not hashed.
pub const BEARER_LEN_MAX: usize = 256;

/// A bearer token. Its `Debug` never shows it; only [`Token::reveal`] does, for the one
/// answer that hands it to its owner.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh token from the operating system's random source.
    pub fn generate() -> Token {
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Token(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The token of an `Authorization: Bearer <token>` header value. `None` for anything
    /// else: another scheme, no token, or a token that is not `cairn_` + 32 bytes.
    pub fn from_bearer(header: &str) -> Option<Token> {
        if header.len() > BEARER_LEN_MAX {
            return None;
        }
        let (scheme, rest) = header.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        Token::parse(rest.trim())
    }

    /// A token in its text form, checked for shape only.
    ///
    /// Decodes onto the stack: this runs on every request of an auth-on cluster (a read
    /// keeps the token its shape check parsed for the authentication after its barrier).
    pub fn parse(text: &str) -> Option<Token> {
        let body = text.strip_prefix(TOKEN_PREFIX)?;
        if body.len() != TOKEN_TEXT_LEN {
            return None;
        }
        let mut decoded = [0u8; TOKEN_BYTES + 3];
        let n = URL_SAFE_NO_PAD.decode_slice(body, &mut decoded).ok()?;
        (n == TOKEN_BYTES).then(|| Token(text.to_string()))
    }

    pub fn hash(&self) -> TokenHash {
        TokenHash(Sha256::digest(self.0.as_bytes()).into())
    }

    /// The secret itself: only for the answer that shows it to its owner once.
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// sha256 of a token: what the replicated state and the log hold.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    /// Equality that takes the same time wherever the first difference is.
    pub fn ct_eq(&self, other: &TokenHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl std::fmt::Debug for TokenHash {
    /// A hash does not reveal the token, but printing it would let logs be matched
    /// against a stolen state file; the first bytes are enough to tell hashes apart.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenHash({:02x}{:02x}…)", self.0[0], self.0[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_parses_back_and_hashes_stably() {
        let t = Token::generate();
        assert!(t.reveal().starts_with(TOKEN_PREFIX));
        assert_eq!(t.reveal().len(), TOKEN_PREFIX.len() + 43);
        let parsed = Token::from_bearer(&format!("Bearer {}", t.reveal())).unwrap();
        assert_eq!(parsed.hash(), t.hash());
        assert!(parsed.hash().ct_eq(&t.hash()));
        assert!(!Token::generate().hash().ct_eq(&t.hash()));
    }

    #[test]
    fn malformed_bearer_values_are_refused() {
        let good = Token::generate();
        for bad in [
            String::new(),
            "Bearer".into(),
            "Bearer ".into(),
            format!("Basic {}", good.reveal()),
            format!("Bearer {}", &good.reveal()[1..]),
            format!("Bearer {}x", good.reveal()),
            format!("Bearer cairn_{}", "A".repeat(400)),
            "Bearer cairn_!!!!".into(),
            // The right length, but not base64url, or with bits past the 32 bytes set.
            format!("Bearer cairn_{}", "!".repeat(43)),
            format!("Bearer cairn_{}B", "A".repeat(42)),
        ] {
            assert!(Token::from_bearer(&bad).is_none(), "{bad:?}");
        }
        assert!(Token::from_bearer(&format!("bearer {}", good.reveal())).is_some());
        assert!(Token::from_bearer(&format!("Bearer cairn_{}", "A".repeat(43))).is_some());
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let t = Token::generate();
        let shown = format!("{t:?} {:?}", t.hash());
        assert!(
            !shown.contains(&t.reveal()[TOKEN_PREFIX.len()..]),
            "{shown}"
        );
        assert!(shown.contains("redacted"));
    }
}
