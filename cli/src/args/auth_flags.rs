//! The flags of `cairn auth …` (SPEC §8) and the `--grant PREFIX=PERM,…` syntax.

use clap::{ArgGroup, Args, Subcommand};

use cairn_client::api::{Grant, Permission};

use crate::help::{AUTH_GRANT_HELP, AUTH_HELP, AUTH_PRINCIPAL_HELP};

/// `cairn auth …`, run by [`crate::auth`].
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Turn auth on for a cluster made without it; prints the admin's token once.
    #[command(after_help = AUTH_HELP)]
    Enable {
        /// Name of the first principal (granted admin and every permission on all keys).
        #[arg(long)]
        admin: String,
    },
    /// Add, rotate, delete or list principals.
    #[command(subcommand, after_help = AUTH_PRINCIPAL_HELP)]
    Principal(PrincipalCommand),
    /// Replace every grant of a principal.
    #[command(after_help = AUTH_GRANT_HELP)]
    Grant(GrantArgs),
    /// The principal of the token in use, and its grants.
    Whoami,
}

#[derive(Debug, Subcommand)]
pub enum PrincipalCommand {
    /// Add a principal; prints its token once.
    Add {
        name: String,
        #[command(flatten)]
        grants: GrantFlags,
    },
    /// Give a principal a new token (printed once); the old one stops working at once.
    Rotate { name: String },
    /// Delete a principal; its token stops working at once.
    Delete { name: String },
    /// Every principal and its grants (never a token).
    List,
}

#[derive(Debug, Args)]
// One of the two, so a refusal of neither names both.
#[command(group(ArgGroup::new("new_grants").required(true).args(["grants", "none"])))]
pub struct GrantArgs {
    pub name: String,
    #[command(flatten)]
    pub grants: GrantFlags,
    /// Remove every grant (the principal can still authenticate, and do nothing).
    #[arg(long)]
    pub none: bool,
}

#[derive(Debug, Args)]
pub struct GrantFlags {
    /// PREFIX=PERM[,PERM...]: PERMs (read, write, forget, revoke, admin) on every key
    /// that starts with PREFIX; an empty PREFIX (`=read`) covers every key. Repeatable.
    #[arg(long = "grant", value_name = "PREFIX=PERMS", value_parser = parse_grant)]
    pub grants: Vec<Grant>,
}

/// `PREFIX=PERM[,PERM...]`, split at the last `=` (a permission never holds one, a key
/// prefix may).
pub fn parse_grant(raw: &str) -> Result<Grant, String> {
    let (prefix, permissions) = raw.rsplit_once('=').ok_or_else(|| {
        format!("{raw:?}: expected PREFIX=PERM[,PERM...], e.g. notes/=read,write or =read")
    })?;
    let mut parsed: Vec<Permission> = Vec::new();
    for name in permissions.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(format!(
                "{raw:?}: empty permission (read, write, forget, revoke, admin)"
            ));
        }
        let permission: Permission = name.parse()?;
        if !parsed.contains(&permission) {
            parsed.push(permission);
        }
    }
    Ok(Grant::new(prefix, parsed))
}

/// Grants as the `--grant` flags that make them: `PREFIX=PERM,PERM`, space separated; `-`
/// for none.
pub fn format_grants(grants: &[Grant]) -> String {
    if grants.is_empty() {
        return "-".into();
    }
    let each = grants.iter().map(|g| {
        let permissions: Vec<&str> = g.permissions.iter().map(|p| p.as_str()).collect();
        format!("{}={}", g.prefix, permissions.join(","))
    });
    each.collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse;

    #[test]
    fn auth_grant_takes_grants_or_none_and_a_refusal_names_both() {
        let neither = parse(&["auth", "grant", "p1"]).unwrap_err().to_string();
        assert!(
            neither.contains("--grant <PREFIX=PERMS>") && neither.contains("--none"),
            "{neither}"
        );
        assert!(parse(&["auth", "grant", "p1", "--none", "--grant", "=read"]).is_err());
        assert!(parse(&["auth", "grant", "p1", "--grant", "=read", "--grant", "a/=write"]).is_ok());
        assert!(parse(&["auth", "grant", "p1", "--none"]).is_ok());
    }

    #[test]
    fn grants_parse_at_the_last_equals_sign() {
        assert_eq!(
            parse_grant("notes/=read,write").unwrap(),
            Grant::new("notes/", [Permission::Read, Permission::Write])
        );
        assert_eq!(
            parse_grant("=admin").unwrap(),
            Grant::new("", [Permission::Admin])
        );
        assert_eq!(
            parse_grant("a=b/=read, read").unwrap(),
            Grant::new("a=b/", [Permission::Read])
        );
        for bad in ["notes/", "notes/=", "notes/=read,", "notes/=delete"] {
            assert!(parse_grant(bad).is_err(), "{bad}");
        }
        let grants = vec![
            Grant::new("", [Permission::Read]),
            Grant::new("p/", [Permission::Write, Permission::Forget]),
        ];
        assert_eq!(format_grants(&grants), "=read p/=write,forget");
        assert_eq!(format_grants(&[]), "-");
    }
}
