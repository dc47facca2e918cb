//! Parser for porcupine's key-value histories (`kv/cNN-{ok,bad}.txt`): one EDN-like map per
//! line,
//!
//! ```text
//! {:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}
//! {:process 0, :type :ok, :f :append, :key "0", :value "x 0 0 y"}
//! {:process 1, :type :invoke, :f :get, :key "9", :value nil}
//! {:process 1, :type :ok, :f :get, :key "9", :value "x 0 0 y"}
//! ```
//!
//! `:f` is `:get` (the `:ok` line's `:value` is what was read; `nil` reads as the empty
//! string, the initial value), `:put` (sets the value) or `:append` (concatenates). Each
//! invocation pairs with the next completion of the same process. `:fail` means the operation
//! did not take effect (dropped); `:info` or no completion means indeterminate (gets dropped:
//! they constrain nothing). Lines whose `:process` is not a number (`:nemesis`) and blank
//! lines are skipped.

use super::history::{History, HistoryBuilder};
use super::models::{KvOp, KvResult};
use super::ParseError;

/// A parsed key-value history.
pub type KvHistory = History<KvOp, KvResult>;

/// Parses a whole file; errors name the 1-based line.
pub fn parse(text: &str) -> Result<KvHistory, ParseError> {
    let mut builder = HistoryBuilder::new();
    for (index, line) in text.lines().enumerate() {
        let at = |message: String| ParseError {
            line: index + 1,
            message,
        };
        if line.trim().is_empty() {
            continue;
        }
        if let Some(event) = event(&parse_map(line).map_err(at)?).map_err(at)? {
            apply(&mut builder, event).map_err(at)?;
        }
    }
    Ok(builder.finish(|op| !matches!(op, KvOp::Get { .. })))
}

/// An EDN scalar, as far as these histories use them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Edn {
    Nil,
    Int(i64),
    Str(String),
    Keyword(String),
}

/// Parses `{:k v, :k v}` into its entries, in order.
fn parse_map(line: &str) -> Result<Vec<(String, Edn)>, String> {
    let mut rest = skip_blank(line)
        .strip_prefix('{')
        .ok_or("expected a map starting with '{'")?;
    let mut entries = Vec::new();
    // Bounded: every iteration consumes at least one key.
    loop {
        rest = skip_blank(rest);
        if let Some(after) = rest.strip_prefix('}') {
            if !skip_blank(after).is_empty() {
                return Err(format!("unexpected text after the map: {after:?}"));
            }
            return Ok(entries);
        }
        let (key, after) = parse_scalar(rest)?;
        let Edn::Keyword(key) = key else {
            return Err(format!("map keys must be keywords, got {key:?}"));
        };
        let (value, after) = parse_scalar(skip_blank(after))?;
        entries.push((key, value));
        rest = after;
    }
}

/// EDN treats commas as whitespace.
fn skip_blank(s: &str) -> &str {
    s.trim_start_matches(|c: char| c.is_whitespace() || c == ',')
}

fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || c == ',' || c == '}'
}

/// One scalar at the start of `s`, and what follows it.
fn parse_scalar(s: &str) -> Result<(Edn, &str), String> {
    if s.starts_with('"') {
        return parse_string(s);
    }
    let end = s.find(is_delimiter).unwrap_or(s.len());
    let (token, rest) = s.split_at(end);
    let value = match token {
        "" => return Err("unexpected end of the map".to_string()),
        "nil" => Edn::Nil,
        _ if token.starts_with(':') && token.len() > 1 => Edn::Keyword(token[1..].to_string()),
        _ => Edn::Int(
            token
                .parse()
                .map_err(|_| format!("unsupported value {token:?}"))?,
        ),
    };
    Ok((value, rest))
}

/// A double-quoted string with `\"`, `\\`, `\n`, `\t` escapes.
fn parse_string(s: &str) -> Result<(Edn, &str), String> {
    let mut out = String::new();
    let mut chars = s.char_indices().skip(1);
    // Bounded by the length of the line.
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((Edn::Str(out), &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, c @ ('"' | '\\'))) => out.push(c),
                other => return Err(format!("unsupported escape {other:?} in a string")),
            },
            c => out.push(c),
        }
    }
    Err("unterminated string".to_string())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Event {
    process: u64,
    kind: Kind,
    f: String,
    key: String,
    value: Edn,
}

fn field<'m>(map: &'m [(String, Edn)], name: &str) -> Result<&'m Edn, String> {
    map.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .ok_or_else(|| format!("missing :{name}"))
}

/// `Ok(None)` for entries that are not client operations (`:process :nemesis`).
fn event(map: &[(String, Edn)]) -> Result<Option<Event>, String> {
    let process = match field(map, "process")? {
        Edn::Int(p) if *p >= 0 => *p as u64,
        Edn::Keyword(_) => return Ok(None),
        other => return Err(format!(":process must be a number, got {other:?}")),
    };
    let kind = match field(map, "type")? {
        Edn::Keyword(k) if k == "invoke" => Kind::Invoke,
        Edn::Keyword(k) if k == "ok" => Kind::Ok,
        Edn::Keyword(k) if k == "fail" => Kind::Fail,
        Edn::Keyword(k) if k == "info" => Kind::Info,
        other => return Err(format!("unknown :type {other:?}")),
    };
    let f = match field(map, "f")? {
        Edn::Keyword(f) if matches!(f.as_str(), "get" | "put" | "append") => f.clone(),
        other => {
            return Err(format!(
                "unknown :f {other:?} (expected :get, :put or :append)"
            ))
        }
    };
    let key = match field(map, "key")? {
        Edn::Str(k) => k.clone(),
        Edn::Int(k) => k.to_string(),
        other => return Err(format!(":key must be a string, got {other:?}")),
    };
    let value = field(map, "value").cloned().unwrap_or(Edn::Nil);
    Ok(Some(Event {
        process,
        kind,
        f,
        key,
        value,
    }))
}

fn text_value(e: &Event) -> Result<String, String> {
    match &e.value {
        Edn::Str(s) => Ok(s.clone()),
        other => Err(format!(":{} needs a string :value, got {other:?}", e.f)),
    }
}

fn invocation(e: &Event) -> Result<KvOp, String> {
    let key = e.key.clone();
    match e.f.as_str() {
        "get" => Ok(KvOp::Get { key }),
        "put" => Ok(KvOp::Put {
            key,
            value: text_value(e)?,
        }),
        _ => Ok(KvOp::Append {
            key,
            value: text_value(e)?,
        }),
    }
}

fn result(e: &Event) -> Result<KvResult, String> {
    match (e.f.as_str(), &e.value) {
        ("get", Edn::Nil) => Ok(KvResult::Get(String::new())),
        ("get", _) => Ok(KvResult::Get(text_value(e)?)),
        ("put", _) => Ok(KvResult::Put),
        _ => Ok(KvResult::Append),
    }
}

/// A completion must be of the operation its process invoked (same function and key).
fn check_matches(invoked: &KvOp, e: &Event) -> Result<(), String> {
    let f = match invoked {
        KvOp::Get { .. } => "get",
        KvOp::Put { .. } => "put",
        KvOp::Append { .. } => "append",
    };
    if f == e.f && invoked.key() == e.key {
        Ok(())
    } else {
        Err(format!(
            "process {} completes :{} of {:?} but invoked {invoked:?}",
            e.process, e.f, e.key
        ))
    }
}

fn apply(b: &mut HistoryBuilder<KvOp, KvResult>, e: Event) -> Result<(), String> {
    if e.kind == Kind::Invoke {
        return b
            .invoke(e.process, invocation(&e)?)
            .map_err(|err| err.to_string());
    }
    let invoked = b.in_flight(e.process).ok_or_else(|| {
        format!(
            "process {} completes an operation it never invoked",
            e.process
        )
    })?;
    check_matches(invoked, &e)?;
    let reading = e.f == "get";
    match e.kind {
        Kind::Ok => b.complete(e.process, result(&e)?),
        Kind::Info if !reading => b.indeterminate(e.process),
        // Failed: did not happen. Unknown read: constrains nothing.
        _ => b.discard(e.process),
    }
    .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_get_put_append() {
        let text = r#"{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :invoke, :f :get, :key "0", :value nil}
{:process 0, :type :ok, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :ok, :f :get, :key "0", :value "x 0 0 y"}
{:process 2, :type :invoke, :f :put, :key "1", :value "a \"q\""}
{:process 2, :type :ok, :f :put, :key "1", :value "a \"q\""}
{:process 1, :type :invoke, :f :get, :key "1", :value nil}
{:process 1, :type :ok, :f :get, :key "1", :value nil}
"#;
        let h = parse(text).unwrap();
        let got: Vec<_> = h
            .ops
            .iter()
            .map(|op| (op.input.clone(), op.output.clone(), op.invoke, op.complete))
            .collect();
        let append = KvOp::Append {
            key: "0".into(),
            value: "x 0 0 y".into(),
        };
        assert_eq!(
            got,
            vec![
                (append, Some(KvResult::Append), 1, Some(3)),
                (
                    KvOp::Get { key: "0".into() },
                    Some(KvResult::Get("x 0 0 y".into())),
                    2,
                    Some(4)
                ),
                (
                    KvOp::Put {
                        key: "1".into(),
                        value: "a \"q\"".into()
                    },
                    Some(KvResult::Put),
                    5,
                    Some(6)
                ),
                (
                    KvOp::Get { key: "1".into() },
                    Some(KvResult::Get(String::new())),
                    7,
                    Some(8)
                ),
            ]
        );
    }

    #[test]
    fn info_fail_nemesis_and_blank_lines() {
        let text = r#"{:process 0, :type :invoke, :f :put, :key "k", :value "a"}
{:process :nemesis, :type :info, :f :start, :value nil}

{:process 1, :type :invoke, :f :append, :key "k", :value "b"}
{:process 2, :type :invoke, :f :get, :key "k", :value nil}
{:process 3, :type :invoke, :f :append, :key "k", :value "c"}
{:process 0, :type :info, :f :put, :key "k", :value "a"}
{:process 1, :type :fail, :f :append, :key "k", :value "b"}
{:process 2, :type :info, :f :get, :key "k", :value nil}
"#;
        let h = parse(text).unwrap();
        let got: Vec<_> = h.ops.iter().map(|op| (op.process, op.complete)).collect();
        // 0: :info put, indeterminate; 1: failed, dropped; 2: unknown get, dropped;
        // 3: never completed, indeterminate.
        assert_eq!(got, vec![(0, None), (3, None)]);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("{:process 0, :type :invoke, :f :get, :key \"k\"", 1),
            ("\n{:process 0, :type :invoke, :f :get, :key \"k\", :value nil} trailing", 2),
            ("{:process 0, :type :invoke, :f :cas, :key \"k\", :value nil}", 1),
            ("{:process 0, :type :ok, :f :get, :key \"k\", :value \"\"}", 1),
            ("{:process 0, :type :invoke, :f :put, :key \"k\", :value nil}", 1),
            ("{:process 0, :type :invoke, :f :get, :key \"k\", :value nil}\n{:process 0, :type :ok, :f :get, :key \"j\", :value \"\"}", 2),
            ("{:process 0, :type :invoke, :f :get, :key \"unterminated}", 1),
            ("[:not-a-map]", 1),
        ];
        for (text, line) in cases {
            let err = parse(text).expect_err(text);
            assert_eq!(err.line, line, "{text}: {err}");
        }
    }
}
