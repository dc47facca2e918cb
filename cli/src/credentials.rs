//! Where the CLI finds its bearer token and TLS files (SPEC §8).
//!
//! The token, first found wins:
//! 1. `--token-file FILE` given on the command line: what the user asked for in this
//!    command beats what the shell's environment happens to hold;
//! 2. `CAIRN_TOKEN` (the token itself; there is no `--token` flag, since a command line
//!    is visible to every user through `ps`);
//! 3. `CAIRN_TOKEN_FILE`;
//! 4. `.cluster/admin.token` in the current directory or the nearest parent that has one
//!    (what `scripts/cluster up` writes), used only when every endpoint is on loopback, so
//!    a local admin token never travels to another host.
//!
//! Without any, requests go without a token (a cluster with auth off). The token never
//! appears in an error message.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cairn_client::{BearerToken, ClientBuilder};

use crate::args::Global;
use crate::Result;

pub const TOKEN_ENV: &str = "CAIRN_TOKEN";
pub const TOKEN_FILE_ENV: &str = "CAIRN_TOKEN_FILE";
/// The admin token of `scripts/cluster up`, relative to a directory holding `.cluster/`.
pub const LOCAL_TOKEN_FILE: &str = ".cluster/admin.token";

/// The token variables of the environment, read once by `main` (tests pass their own).
#[derive(Debug, Default)]
pub struct TokenEnv {
    /// `CAIRN_TOKEN`
    pub token: Option<String>,
    /// `CAIRN_TOKEN_FILE`
    pub token_file: Option<PathBuf>,
}

impl TokenEnv {
    pub fn from_process() -> TokenEnv {
        TokenEnv {
            token: std::env::var(TOKEN_ENV).ok(),
            token_file: std::env::var_os(TOKEN_FILE_ENV).map(PathBuf::from),
        }
    }
}

/// The token by the rules above; `cwd` is where the walk up starts.
pub fn find_token(
    global: &Global,
    env: TokenEnv,
    cwd: Option<&Path>,
) -> Result<Option<BearerToken>> {
    if let Some(path) = &global.token_file {
        return BearerToken::from_file(path).map(Some);
    }
    if let Some(token) = env.token.filter(|t| !t.trim().is_empty()) {
        return BearerToken::new(token).map(Some).map_err(|err| match err {
            cairn_client::ClientError::InvalidInput { message } => {
                cairn_client::ClientError::InvalidInput {
                    message: format!("{TOKEN_ENV}: {message}"),
                }
            }
            other => other,
        });
    }
    if let Some(path) = env.token_file.filter(|p| !p.as_os_str().is_empty()) {
        return BearerToken::from_file(&path).map(Some);
    }
    if !global.endpoints.iter().all(|e| is_loopback(e)) {
        return Ok(None);
    }
    match cwd.and_then(local_token_file) {
        Some(path) => BearerToken::from_file(&path).map(Some),
        None => Ok(None),
    }
}

/// `DIR/.cluster/admin.token` for the nearest `DIR` (from `start` upwards) that has it.
pub fn local_token_file(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join(LOCAL_TOKEN_FILE))
        .find(|path| path.is_file())
}

/// `true` for `[scheme://]HOST[:port][/...]` with HOST `localhost` or a loopback IP.
fn is_loopback(endpoint: &str) -> bool {
    let rest = endpoint
        .trim()
        .split_once("://")
        .map_or(endpoint.trim(), |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `--cacert`, `--cert`/`--key` on the client builder.
pub fn apply_tls(global: &Global, mut builder: ClientBuilder) -> ClientBuilder {
    if let Some(ca) = &global.cacert {
        builder = builder.ca_cert_file(ca);
    }
    if let (Some(cert), Some(key)) = (&global.cert, &global.key) {
        builder = builder.client_identity_files(cert, key);
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse;

    const TOKEN: &str = "cairn_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA";
    const OTHER: &str = "cairn_b3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXI";

    fn global(args: &[&str]) -> Global {
        let mut all = vec!["--endpoints", "127.0.0.1:7401,localhost:7402,[::1]:7403"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["read", "k"]);
        parse(&all).unwrap().global
    }

    #[test]
    fn the_token_comes_from_the_flag_then_the_environment_then_the_cluster_dir() {
        let root = tempfile::tempdir().unwrap();
        let nested = root.path().join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::create_dir_all(root.path().join(".cluster")).unwrap();
        std::fs::write(root.path().join(LOCAL_TOKEN_FILE), format!("{TOKEN}\n")).unwrap();
        let flag_file = root.path().join("agent.token");
        std::fs::write(&flag_file, OTHER).unwrap();
        let flag = flag_file.to_str().unwrap();

        let found = |global: &Global, env: Option<&str>| {
            let env = TokenEnv {
                token: env.map(String::from),
                token_file: None,
            };
            find_token(global, env, Some(&nested))
                .unwrap()
                .map(|t| t.expose().to_string())
        };
        assert_eq!(found(&global(&[]), None).as_deref(), Some(TOKEN));
        assert_eq!(
            found(&global(&["--token-file", flag]), None).as_deref(),
            Some(OTHER)
        );
        assert_eq!(
            found(&global(&["--token-file", flag]), Some(TOKEN)).as_deref(),
            Some(OTHER),
            "the flag beats CAIRN_TOKEN"
        );
        let file_env = |token: Option<&str>| TokenEnv {
            token: token.map(String::from),
            token_file: Some(flag_file.clone()),
        };
        let found_with = |env: TokenEnv| {
            find_token(&global(&[]), env, Some(&nested))
                .unwrap()
                .map(|t| t.expose().to_string())
        };
        assert_eq!(found_with(file_env(None)).as_deref(), Some(OTHER));
        assert_eq!(
            found_with(file_env(Some(TOKEN))).as_deref(),
            Some(TOKEN),
            "CAIRN_TOKEN beats CAIRN_TOKEN_FILE"
        );
        assert_eq!(
            found(&global(&[]), Some(" ")).as_deref(),
            Some(TOKEN),
            "an empty CAIRN_TOKEN is unset"
        );
        let remote = parse(&["--endpoints", "10.0.0.1:7401,127.0.0.1:7402", "read", "k"])
            .unwrap()
            .global;
        assert_eq!(found(&remote, None), None, "the local token stays local");
        let outside = tempfile::tempdir().unwrap();
        assert_eq!(
            find_token(&global(&[]), TokenEnv::default(), Some(outside.path())).unwrap(),
            None
        );
    }

    #[test]
    fn token_errors_never_quote_it() {
        let env = TokenEnv {
            token: Some(format!("{TOKEN} x")),
            token_file: None,
        };
        let err = find_token(&global(&[]), env, None).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid_input: CAIRN_TOKEN: "),
            "{err}"
        );
        assert!(!err.to_string().contains(TOKEN), "{err}");
        let err = find_token(
            &global(&["--token-file", "/nonexistent/t"]),
            TokenEnv::default(),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/t"), "{err}");
    }

    #[test]
    fn loopback_hosts() {
        for yes in [
            "127.0.0.1:7401",
            "http://127.0.0.2:1",
            "https://localhost:7401/",
            "[::1]:7",
        ] {
            assert!(is_loopback(yes), "{yes}");
        }
        for no in [
            "10.0.0.1:7401",
            "https://db.example:7401",
            "http://[fe80::1]:7",
            "evil.localhost.example:1",
        ] {
            assert!(!is_loopback(no), "{no}");
        }
    }

    #[test]
    fn cert_needs_key() {
        assert!(parse(&["--cert", "c.pem", "read", "k"]).is_err());
        let g = global(&["--cacert", "ca.pem", "--cert", "c.pem", "--key", "c.key"]);
        assert_eq!(g.cacert.as_deref(), Some(Path::new("ca.pem")));
    }
}
