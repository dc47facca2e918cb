//! The key commands: mutations, reads, batch and watch. Each builds its request from the
//! flags, calls the client and prints the answer (human form in [`crate::render`]).

use std::io::Read;
use std::path::Path;

use futures::StreamExt;
use serde_json::Value;

use cairn_client::api::{
    BatchRequest, FlagStaleRequest, ForgetRequest, ListRequest, ReadOptions, RecallRequest,
    ReinstateRequest, RevokeRequest, SupersedeRequest, WriteRequest,
};
use cairn_client::ClientError;

use crate::args::{
    non_empty, Common, FlagStaleArgs, KeyCommand, ListArgs, OptionalReasonArgs, ReadFlags,
    ReasonArgs, RecallArgs, SupersedeArgs, WatchArgs, WriteArgs,
};
use crate::render::{
    print_batch, print_history, print_list, print_mutation, print_probe, print_read, print_recall,
    print_tombstone, print_watch_event,
};
use crate::{io_error, Ctx, Result};

pub async fn run(ctx: &Ctx, command: KeyCommand) -> Result<()> {
    let client = &ctx.client;
    match command {
        KeyCommand::Write(a) => {
            let request = ctx.actor(a.request()?);
            ctx.emit(&client.write(request).await?, print_mutation)
        }
        KeyCommand::Forget(a) => {
            let request = ctx.actor(a.forget());
            ctx.emit(&client.forget(request).await?, print_mutation)
        }
        KeyCommand::Revoke(a) => {
            let request = ctx.actor(a.revoke());
            ctx.emit(&client.revoke(request).await?, print_mutation)
        }
        KeyCommand::Reinstate(a) => {
            let request = ctx.actor(a.reinstate());
            ctx.emit(&client.reinstate(request).await?, print_mutation)
        }
        KeyCommand::FlagStale(a) => {
            let request = ctx.actor(a.request());
            ctx.emit(&client.flag_stale(request).await?, print_mutation)
        }
        KeyCommand::Supersede(a) => {
            let request = ctx.actor(a.request());
            ctx.emit(&client.supersede(request).await?, print_mutation)
        }
        KeyCommand::Batch(a) => ctx.emit(&client.batch(read_batch(&a.file)?).await?, print_batch),
        KeyCommand::Read(a) => {
            let read = client.read(&a.key, a.read.options()).await?;
            ctx.emit(&read, print_read)
        }
        KeyCommand::Probe(a) => {
            let probe = client.probe(&a.key, a.read.options()).await?;
            ctx.emit(&probe, print_probe)
        }
        KeyCommand::History(a) => {
            let history = client.history(&a.key, a.read.options()).await?;
            ctx.emit(&history, print_history)
        }
        KeyCommand::Tombstone(a) => {
            let tombstone = client.tombstone(&a.id, a.read.options()).await?;
            ctx.emit(&tombstone, print_tombstone)
        }
        KeyCommand::List(a) => ctx.emit(&client.list(a.request()).await?, print_list),
        KeyCommand::Recall(a) => ctx.emit(&client.recall(a.request()).await?, print_recall),
        KeyCommand::Watch(a) => watch(ctx, a).await,
    }
}

/// Prints events until the stream ends (Ctrl-C, or an error after bounded reconnects).
async fn watch(ctx: &Ctx, args: WatchArgs) -> Result<()> {
    let mut events = ctx
        .client
        .watch(args.prefix.as_deref(), args.from_revision)
        .await?;
    while let Some(event) = events.next().await {
        ctx.emit(&event?, print_watch_event)?;
    }
    Ok(())
}

fn read_batch(file: &Path) -> Result<BatchRequest> {
    let text = if file == Path::new("-") {
        read_stdin()?
    } else {
        std::fs::read_to_string(file).map_err(|e| io_error(file.display(), e))?
    };
    let refused = |why: String| ClientError::InvalidInput {
        message: format!("batch {}: {why}", file.display()),
    };
    // As the node's body: a JSON object (serde would also take an array of the fields).
    if !text.trim_start().starts_with('{') {
        return Err(refused(
            r#"expected a JSON object {"ops": [...]}"#.to_string(),
        ));
    }
    serde_json::from_str(&text).map_err(|e| refused(e.to_string()))
}

/// All of stdin, as it is (a final newline included).
fn read_stdin() -> Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| io_error("stdin", e))?;
    Ok(text)
}

// -- flags → requests ---------------------------------------------------------------------

/// The actor of a mutation without `--actor` when no token is sent (auth off, where the
/// node needs a name).
const ACTOR_WITHOUT_TOKEN: &str = "cli";

impl Ctx {
    /// Without `--actor`, a request with a token leaves `actor` out (the node records the
    /// principal's name, SPEC §8), and one without a token says `cli`.
    fn actor<R: Conditioned>(&self, mut request: R) -> R {
        let actor = request.actor_mut();
        if actor.is_empty() && !self.client.has_token() {
            *actor = ACTOR_WITHOUT_TOKEN.to_string();
        }
        request
    }
}

/// Mutation requests that carry the [`Common`] conditions.
trait Conditioned {
    fn set_conditions(&mut self, common: Common);
    fn actor_mut(&mut self) -> &mut String;
}

macro_rules! conditioned {
    ($($request:ty),*) => {$(
        impl Conditioned for $request {
            fn actor_mut(&mut self) -> &mut String {
                &mut self.actor
            }

            fn set_conditions(&mut self, common: Common) {
                self.actor = common.actor.unwrap_or_default();
                self.expected_version = common.expected_version;
                self.based_on_revision = common.based_on_revision;
                self.request_id = common.request_id;
            }
        }
    )*};
}

conditioned!(
    WriteRequest,
    ForgetRequest,
    RevokeRequest,
    ReinstateRequest,
    FlagStaleRequest,
    SupersedeRequest
);

impl Common {
    fn apply<R: Conditioned>(self, mut request: R) -> R {
        request.set_conditions(self);
        request
    }
}

/// VALUE `-` of `cairn write`: the value is stdin, which may be bigger than a command line
/// can be (the OS bounds one argument to about 128 KiB).
const VALUE_FROM_STDIN: &str = "-";

impl WriteArgs {
    fn request(self) -> Result<WriteRequest> {
        let value = match self.value.as_str() {
            VALUE_FROM_STDIN => parse_value(&read_stdin()?)?,
            raw => parse_value(raw)?,
        };
        let mut request = WriteRequest::new(self.key, value, "");
        request.source = self.source;
        request.anchors = non_empty(self.anchors);
        request.tags = non_empty(self.tags);
        request.clear_tombstone = self.clear_tombstone;
        request.override_revocation = self.override_revocation;
        request.reason = self.reason;
        Ok(self.common.apply(request))
    }
}

impl ReasonArgs {
    fn forget(self) -> ForgetRequest {
        self.common
            .apply(ForgetRequest::new(self.key, "", self.reason))
    }

    fn revoke(self) -> RevokeRequest {
        self.common
            .apply(RevokeRequest::new(self.key, "", self.reason))
    }
}

impl OptionalReasonArgs {
    fn reinstate(self) -> ReinstateRequest {
        let mut request = ReinstateRequest::new(self.key, "");
        request.reason = self.reason;
        self.common.apply(request)
    }
}

impl FlagStaleArgs {
    fn request(self) -> FlagStaleRequest {
        let request = FlagStaleRequest::new(self.key, "", self.anchor, self.observed_hash);
        self.common.apply(request)
    }
}

impl SupersedeArgs {
    fn request(self) -> SupersedeRequest {
        let mut request = SupersedeRequest::new(self.key, self.by, "");
        request.reason = self.reason;
        self.common.apply(request)
    }
}

impl ReadFlags {
    /// The read's own options; `--consistency` and `--max-staleness-ms` come through the
    /// client defaults.
    fn options(&self) -> ReadOptions {
        ReadOptions {
            min_revision: self.min_revision,
            ..ReadOptions::default()
        }
    }
}

impl ListArgs {
    fn request(self) -> ListRequest {
        let mut request = ListRequest::new(self.prefix);
        request.states = non_empty(self.states);
        request.limit = self.limit;
        request.after = self.after;
        request.min_revision = self.read.min_revision;
        request
    }
}

impl RecallArgs {
    fn request(self) -> RecallRequest {
        let mut request = RecallRequest::new(self.cues);
        request.prefix = self.prefix;
        request.include = non_empty(self.include);
        request.limit = self.limit;
        request.min_revision = self.read.min_revision;
        request
    }
}

/// VALUE as JSON when it parses (`42`, `true`, `{"a":1}`, `"quoted"`), else the raw string.
/// JSON the node would refuse is refused here, not sent as a string or changed: nested
/// deeper than the parser goes (SPEC §5 extension: its nesting limit), or an object that
/// names a member twice (`{"a":1,"a":2}` would otherwise be sent as `{"a":2}`).
fn parse_value(raw: &str) -> Result<Value> {
    match serde_json::from_str::<Value>(raw) {
        Ok(_) => cairn_client::api::value_from_str(raw).map_err(|e| ClientError::InvalidInput {
            message: format!("VALUE: {e}"),
        }),
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            Err(ClientError::InvalidInput {
                message: format!(
                    "VALUE nests deeper than the node accepts (its nesting limit is in \
                     docs/api.md): {e}"
                ),
            })
        }
        Err(_) => Ok(Value::String(raw.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use cairn_client::api::State;

    use super::*;
    use crate::args::{parse, Command};

    fn key_command(args: &[&str]) -> KeyCommand {
        match parse(args).unwrap().command {
            Command::Key(command) => command,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn without_actor_a_token_leaves_it_out_and_no_token_says_cli() {
        let ctx = |token: Option<&str>| {
            let mut builder = cairn_client::Client::builder(vec!["127.0.0.1:1".into()]);
            if let Some(token) = token {
                builder = builder.token(token);
            }
            Ctx {
                client: builder.build().unwrap(),
                json: false,
            }
        };
        let KeyCommand::Write(args) = key_command(&["write", "k", "v"]) else {
            panic!()
        };
        let request = args.request().unwrap();
        assert_eq!(request.actor, "");
        assert_eq!(ctx(None).actor(request.clone()).actor, "cli");
        assert_eq!(ctx(Some("cairn_x")).actor(request).actor, "");
        let KeyCommand::Forget(args) =
            key_command(&["forget", "k", "--reason", "r", "--actor", "alice"])
        else {
            panic!()
        };
        assert_eq!(ctx(Some("cairn_x")).actor(args.forget()).actor, "alice");
    }

    #[test]
    fn write_flags_build_the_request() {
        let command = key_command(&[
            "write",
            "k",
            "{\"a\":1}",
            "--actor",
            "agent",
            "--anchor",
            "path:src/",
            "--anchor",
            "tag:x",
            "--tag",
            "t",
            "--expected-version",
            "0",
            "--clear-tombstone",
            "--request-id",
            "r1",
        ]);
        let KeyCommand::Write(args) = command else {
            panic!()
        };
        let request = args.request().unwrap();
        assert_eq!(request.value, json!({"a": 1}));
        assert_eq!(request.actor, "agent");
        assert_eq!(
            request.anchors,
            Some(vec!["path:src/".into(), "tag:x".into()])
        );
        assert_eq!(request.tags, Some(vec!["t".into()]));
        assert_eq!(request.expected_version, Some(0));
        assert!(request.clear_tombstone && !request.override_revocation);
        assert_eq!(request.request_id.as_deref(), Some("r1"));
    }

    #[test]
    fn values_are_json_when_they_parse() {
        assert_eq!(parse_value("42").unwrap(), json!(42));
        assert_eq!(parse_value("\"42\"").unwrap(), json!("42"));
        assert_eq!(parse_value("hello world").unwrap(), json!("hello world"));
        assert_eq!(parse_value("[1,").unwrap(), json!("[1,"));
        let deep = format!("{}{}", "[".repeat(130), "]".repeat(130));
        assert!(matches!(
            parse_value(&deep),
            Err(ClientError::InvalidInput { message }) if message.contains("nests deeper")
        ));
        // JSON the node would refuse is refused, not sent changed: `{"a":2}`.
        for twice in [r#"{"a":1,"a":2}"#, r#"[{"b":{"c":1,"c":2}}]"#] {
            assert!(
                matches!(
                    parse_value(twice),
                    Err(ClientError::InvalidInput { message }) if message.contains("duplicate field")
                ),
                "{twice}"
            );
        }
    }

    #[test]
    fn a_negative_number_is_a_value_not_a_flag() {
        for (raw, value) in [("-1", json!(-1)), ("-0.5", json!(-0.5))] {
            let KeyCommand::Write(args) = key_command(&["write", "k", raw]) else {
                panic!("a write");
            };
            assert_eq!(parse_value(&args.value).unwrap(), value, "{raw}");
        }
    }

    #[test]
    fn a_batch_file_is_a_json_object() {
        let dir = std::env::temp_dir().join(format!("cairn-batch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ops.json");
        std::fs::write(&file, r#"[[{"op":"write","key":"k","value":1}]]"#).unwrap();
        let refused = read_batch(&file).unwrap_err();
        assert!(
            refused.to_string().contains("expected a JSON object"),
            "{refused}"
        );
        std::fs::write(
            &file,
            r#"{"ops":[{"op":"write","key":"k","value":1,"actor":"a"}]}"#,
        )
        .unwrap();
        assert_eq!(read_batch(&file).unwrap().ops.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn forget_and_revoke_require_a_reason() {
        assert!(parse(&["forget", "k"]).is_err());
        assert!(parse(&["revoke", "k"]).is_err());
        let command = key_command(&["forget", "k", "--reason", "wrong", "--actor", "a"]);
        let KeyCommand::Forget(args) = command else {
            panic!()
        };
        let request = args.forget();
        assert_eq!(
            (request.reason.as_str(), request.actor.as_str()),
            ("wrong", "a")
        );
        assert!(parse(&["reinstate", "k"]).is_ok());
    }

    #[test]
    fn list_and_recall_arguments() {
        let command = key_command(&[
            "list", "p/", "--state", "revoked", "--state", "active", "--limit", "5",
        ]);
        let KeyCommand::List(args) = command else {
            panic!()
        };
        let request = args.request();
        assert_eq!(request.states, Some(vec![State::Revoked, State::Active]));
        assert_eq!((request.prefix.as_str(), request.limit), ("p/", Some(5)));
        assert!(parse(&["list", "--state", "gone"]).is_err());
        assert!(parse(&["recall"]).is_err(), "at least one cue");
        assert!(parse(&["recall", "path:a", "topic:b", "--prefix", "p"]).is_ok());
        let command = key_command(&[
            "recall",
            "path:a",
            "--include",
            "revoked",
            "--min-revision",
            "7",
        ]);
        let KeyCommand::Recall(args) = command else {
            panic!()
        };
        let request = args.request();
        assert_eq!(request.include, Some(vec![State::Revoked]));
        assert_eq!(request.min_revision, Some(7));
        assert!(parse(&["recall", "path:a", "--include", "gone"]).is_err());
        let KeyCommand::Recall(args) = key_command(&["recall", "path:a"]) else {
            panic!()
        };
        assert_eq!(args.request().include, None, "the node's default");
    }

    #[test]
    fn every_read_takes_min_revision() {
        for read in [
            &["read", "k"][..],
            &["probe", "k"],
            &["history", "k"],
            &["tombstone", "ab"],
            &["list", "p/"],
            &["recall", "path:a"],
        ] {
            let args = [read, &["--min-revision", "42"]].concat();
            let min_revision = match key_command(&args) {
                KeyCommand::Read(a) | KeyCommand::Probe(a) | KeyCommand::History(a) => {
                    a.read.options().min_revision
                }
                KeyCommand::Tombstone(a) => a.read.options().min_revision,
                KeyCommand::List(a) => a.request().min_revision,
                KeyCommand::Recall(a) => a.request().min_revision,
                other => panic!("{other:?}"),
            };
            assert_eq!(min_revision, Some(42), "{read:?}");
        }
    }

    #[test]
    fn batch_files_are_strict() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("batch.json");
        std::fs::write(
            &path,
            r#"{"ops":[{"op":"forget","key":"k","actor":"a","reason":"r"}]}"#,
        )
        .unwrap();
        assert_eq!(read_batch(&path).unwrap().ops.len(), 1);
        std::fs::write(&path, r#"{"ops":[{"op":"erase","key":"k"}]}"#).unwrap();
        assert_eq!(read_batch(&path).unwrap_err().exit_code(), 2);
        assert_eq!(
            read_batch(&dir.path().join("missing"))
                .unwrap_err()
                .exit_code(),
            1
        );
    }
}
