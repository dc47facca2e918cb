//! `cairn auth …` (SPEC §8): turning auth on, principals and their tokens, grants, and
//! `whoami`. A token is printed only by the command that made it, once; the node keeps
//! nothing but its hash.

use crate::args::{AuthCommand, GrantArgs, PrincipalCommand};
use crate::render::{
    print_acl_changed, print_auth_enabled, print_created_principal, print_principals,
    print_rotated_token, print_whoami,
};
use crate::{Ctx, Result};

pub async fn run(ctx: &Ctx, command: AuthCommand) -> Result<()> {
    let client = &ctx.client;
    match command {
        AuthCommand::Enable { admin } => {
            ctx.emit(&client.enable_auth(&admin).await?, print_auth_enabled)
        }
        AuthCommand::Principal(command) => principal(ctx, command).await,
        AuthCommand::Grant(GrantArgs { name, grants, .. }) => {
            // `--none` is the only way to give no `--grant`: the empty list it sends.
            let changed = client.set_grants(&name, grants.grants).await?;
            ctx.emit(&changed, print_acl_changed)
        }
        AuthCommand::Whoami => ctx.emit(&client.whoami().await?, print_whoami),
    }
}

async fn principal(ctx: &Ctx, command: PrincipalCommand) -> Result<()> {
    let client = &ctx.client;
    match command {
        PrincipalCommand::Add { name, grants } => {
            let created = client.create_principal(&name, grants.grants).await?;
            ctx.emit(&created, print_created_principal)
        }
        PrincipalCommand::Rotate { name } => {
            ctx.emit(&client.rotate_token(&name).await?, print_rotated_token)
        }
        PrincipalCommand::Delete { name } => {
            ctx.emit(&client.delete_principal(&name).await?, print_acl_changed)
        }
        PrincipalCommand::List => ctx.emit(&client.principals().await?, print_principals),
    }
}

#[cfg(test)]
mod tests {
    use cairn_client::api::{Grant, Permission};

    use crate::args::{parse, AuthCommand, Command, GrantArgs, PrincipalCommand};

    fn auth_command(args: &[&str]) -> AuthCommand {
        match parse(args).unwrap().command {
            Command::Auth(command) => command,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn principal_and_grant_flags() {
        let AuthCommand::Principal(PrincipalCommand::Add { name, grants }) = auth_command(&[
            "auth",
            "principal",
            "add",
            "agent-7",
            "--grant",
            "notes/=read,write",
            "--grant",
            "=read",
        ]) else {
            panic!()
        };
        assert_eq!(name, "agent-7");
        assert_eq!(
            grants.grants,
            [
                Grant::new("notes/", [Permission::Read, Permission::Write]),
                Grant::new("", [Permission::Read])
            ]
        );
        let AuthCommand::Grant(GrantArgs { grants, none, .. }) =
            auth_command(&["auth", "grant", "agent-7", "--none"])
        else {
            panic!()
        };
        assert!(none && grants.grants.is_empty());
        assert!(
            parse(&["auth", "grant", "agent-7"]).is_err(),
            "--grant or --none"
        );
        assert!(parse(&["auth", "grant", "a", "--none", "--grant", "=read"]).is_err());
        assert!(parse(&["auth", "principal", "add", "a", "--grant", "x=root"]).is_err());
        assert!(parse(&["auth", "enable"]).is_err(), "--admin is required");
        assert!(matches!(
            auth_command(&["auth", "whoami"]),
            AuthCommand::Whoami
        ));
    }
}
