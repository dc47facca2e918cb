//! Parser for Jepsen's 2014 etcd register logs (porcupine's `jepsen-etcd/etcd_NNN.log`).
//!
//! Lines of interest look like `INFO  jepsen.util - P\t:TYPE\t:F\tARG`, P the process, TYPE
//! `invoke` / `ok` / `fail` / `info`, F `read` / `write` / `cas`:
//!
//! | line | meaning |
//! |---|---|
//! | `:invoke :read nil`, `:ok :read 3` / `:ok :read nil` | read 3 / read "absent" |
//! | `:invoke :write 4`, `:ok :write 4` | write |
//! | `:invoke :cas [3 0]`, `:ok :cas [3 0]` | swapped 3 for 0 |
//! | `:fail :cas [3 0]` | did not swap: the value was not 3 when it took effect |
//! | `:fail :read :timed-out` | the read's outcome is unknown: it constrains nothing, dropped |
//! | other `:fail` (`:fail :write ...`) | did not take effect: dropped |
//! | `:info ...`, or no completion at all | indeterminate: may take effect any time after the invocation, or never (reads: dropped) |
//!
//! Each invocation pairs with the next completion of the same process (Jepsen gives a
//! process whose operation went `:info` a new number). Lines without `jepsen.util - P` for a
//! numeric P (nemesis, setup, anything else) carry no client operation and are skipped.

use super::history::{BuildError, History, HistoryBuilder};
use super::models::{RegisterOp, RegisterResult, Value};
use super::ParseError;

/// A parsed history of the single etcd register.
pub type EtcdHistory = History<RegisterOp, RegisterResult>;

/// Parses a whole log; errors name the 1-based line.
pub fn parse(text: &str) -> Result<EtcdHistory, ParseError> {
    let mut builder = HistoryBuilder::new();
    for (index, line) in text.lines().enumerate() {
        let at = |message: String| ParseError {
            line: index + 1,
            message,
        };
        if let Some(event) = parse_line(line).map_err(at)? {
            apply(&mut builder, event).map_err(at)?;
        }
    }
    // A read that never completed has no result to check.
    Ok(builder.finish(|op| *op != RegisterOp::Read))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Function {
    Read,
    Write,
    Cas,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Arg {
    Nil,
    Int(Value),
    Pair(Value, Value),
    /// `:timed-out` and the like.
    Keyword(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Event {
    process: u64,
    kind: Kind,
    f: Function,
    arg: Arg,
}

/// `Ok(None)` for lines that carry no client operation.
fn parse_line(line: &str) -> Result<Option<Event>, String> {
    let Some((_, rest)) = line.split_once("jepsen.util") else {
        return Ok(None);
    };
    let Some(rest) = rest.trim_start().strip_prefix('-') else {
        return Ok(None);
    };
    let (process, rest) = next_field(rest);
    // `:nemesis` and other non-numeric "processes" are not clients.
    let Ok(process) = process.parse::<u64>() else {
        return Ok(None);
    };
    let (kind, rest) = next_field(rest);
    let (f, arg) = next_field(rest);
    Ok(Some(Event {
        process,
        kind: parse_kind(kind)?,
        f: parse_function(f)?,
        arg: parse_arg(arg.trim())?,
    }))
}

/// Splits off the first whitespace-separated field; the rest keeps inner spaces (`[3 0]`).
fn next_field(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    s.split_once(char::is_whitespace).unwrap_or((s, ""))
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    match s {
        ":invoke" => Ok(Kind::Invoke),
        ":ok" => Ok(Kind::Ok),
        ":fail" => Ok(Kind::Fail),
        ":info" => Ok(Kind::Info),
        _ => Err(format!(
            "unknown event type {s:?} (expected :invoke, :ok, :fail or :info)"
        )),
    }
}

fn parse_function(s: &str) -> Result<Function, String> {
    match s {
        ":read" => Ok(Function::Read),
        ":write" => Ok(Function::Write),
        ":cas" => Ok(Function::Cas),
        _ => Err(format!(
            "unknown operation {s:?} (expected :read, :write or :cas)"
        )),
    }
}

fn parse_arg(s: &str) -> Result<Arg, String> {
    if s == "nil" {
        return Ok(Arg::Nil);
    }
    if s.starts_with(':') && !s.contains(char::is_whitespace) {
        return Ok(Arg::Keyword(s.to_string()));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        let mut parts = inner.split_whitespace();
        if let (Some(a), Some(b), None) = (parts.next(), parts.next(), parts.next()) {
            return Ok(Arg::Pair(parse_value(a)?, parse_value(b)?));
        }
        return Err(format!("expected a pair like [3 0], got {s:?}"));
    }
    parse_value(s).map(Arg::Int)
}

fn parse_value(s: &str) -> Result<Value, String> {
    s.parse()
        .map_err(|_| format!("expected an integer value, got {s:?}"))
}

fn build_error(e: BuildError) -> String {
    e.to_string()
}

fn apply(b: &mut HistoryBuilder<RegisterOp, RegisterResult>, e: Event) -> Result<(), String> {
    if e.kind == Kind::Invoke {
        return b
            .invoke(e.process, invocation(e.f, &e.arg)?)
            .map_err(build_error);
    }
    let invoked = b
        .in_flight(e.process)
        .ok_or_else(|| build_error(BuildError::NothingInFlight(e.process)))?;
    check_matches(invoked, &e)?;
    let result = match (e.kind, e.f, &e.arg) {
        (Kind::Ok, Function::Read, Arg::Nil) => Some(RegisterResult::Read(None)),
        (Kind::Ok, Function::Read, Arg::Int(v)) => Some(RegisterResult::Read(Some(*v))),
        (Kind::Ok, Function::Write, _) => Some(RegisterResult::Write),
        (Kind::Ok, Function::Cas, _) => Some(RegisterResult::Cas { swapped: true }),
        (Kind::Ok, Function::Read, arg) => return Err(format!("a read cannot return {arg:?}")),
        // The compare failed: completed, and it constrains the value.
        (Kind::Fail, Function::Cas, Arg::Pair(..)) => Some(RegisterResult::Cas { swapped: false }),
        (Kind::Fail, ..) => None,
        (Kind::Info, Function::Read, _) => None,
        (Kind::Info, ..) => return b.indeterminate(e.process).map_err(build_error),
        (Kind::Invoke, ..) => unreachable!("handled above"),
    };
    match result {
        Some(result) => b.complete(e.process, result),
        None => b.discard(e.process),
    }
    .map_err(build_error)
}

fn invocation(f: Function, arg: &Arg) -> Result<RegisterOp, String> {
    match (f, arg) {
        (Function::Read, _) => Ok(RegisterOp::Read),
        (Function::Write, Arg::Int(v)) => Ok(RegisterOp::Write(*v)),
        (Function::Cas, Arg::Pair(expect, new)) => Ok(RegisterOp::Cas {
            expect: *expect,
            new: *new,
        }),
        (f, arg) => Err(format!("{f:?} cannot be invoked with {arg:?}")),
    }
}

/// A completion must be of the operation its process invoked; a mismatch means the log is
/// not what this parser understands, and guessing would give a wrong verdict.
fn check_matches(invoked: &RegisterOp, e: &Event) -> Result<(), String> {
    let same = match (invoked, e.f, &e.arg) {
        (RegisterOp::Read, Function::Read, _) => true,
        // `:info` / `:fail` lines may carry `:timed-out` instead of the argument.
        (RegisterOp::Write(_), Function::Write, Arg::Keyword(_))
        | (RegisterOp::Cas { .. }, Function::Cas, Arg::Keyword(_)) => true,
        (RegisterOp::Write(v), Function::Write, Arg::Int(w)) => v == w,
        (RegisterOp::Cas { expect, new }, Function::Cas, Arg::Pair(a, b)) => {
            expect == a && new == b
        }
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "process {} completes {:?} {:?} but invoked {invoked:?}",
            e.process, e.f, e.arg
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(p: &str, kind: &str, f: &str, arg: &str) -> String {
        format!("INFO  jepsen.util - {p}\t:{kind}\t:{f}\t{arg}\n")
    }

    #[test]
    fn parses_reads_writes_and_cas() {
        let text = [
            line("0", "invoke", "read", "nil"),
            line("1", "invoke", "write", "4"),
            line("0", "ok", "read", "nil"),
            line("1", "ok", "write", "4"),
            line("2", "invoke", "cas", "[4 0]"),
            line("3", "invoke", "cas", "[1 2]"),
            line("2", "ok", "cas", "[4 0]"),
            line("3", "fail", "cas", "[1 2]"),
            line("0", "invoke", "read", "nil"),
            line("0", "ok", "read", "0"),
        ]
        .concat();
        let h = parse(&text).unwrap();
        let got: Vec<_> = h
            .ops
            .iter()
            .map(|op| {
                (
                    op.process,
                    op.input.clone(),
                    op.output.clone(),
                    op.invoke,
                    op.complete,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    0,
                    RegisterOp::Read,
                    Some(RegisterResult::Read(None)),
                    1,
                    Some(3)
                ),
                (
                    1,
                    RegisterOp::Write(4),
                    Some(RegisterResult::Write),
                    2,
                    Some(4)
                ),
                (
                    2,
                    RegisterOp::Cas { expect: 4, new: 0 },
                    Some(RegisterResult::Cas { swapped: true }),
                    5,
                    Some(7)
                ),
                (
                    3,
                    RegisterOp::Cas { expect: 1, new: 2 },
                    Some(RegisterResult::Cas { swapped: false }),
                    6,
                    Some(8)
                ),
                (
                    0,
                    RegisterOp::Read,
                    Some(RegisterResult::Read(Some(0))),
                    9,
                    Some(10)
                ),
            ]
        );
    }

    #[test]
    fn info_and_missing_completions_are_indeterminate_and_unknown_reads_dropped() {
        let text = [
            line("0", "invoke", "write", "1"),
            line("1", "invoke", "cas", "[1 2]"),
            line("2", "invoke", "read", "nil"),
            line("3", "invoke", "read", "nil"),
            line("4", "invoke", "write", "3"),
            line("0", "info", "write", ":timed-out"),
            line("1", "info", "cas", ":timed-out"),
            line("2", "fail", "read", ":timed-out"),
            line("3", "info", "read", ":timed-out"),
        ]
        .concat();
        let h = parse(&text).unwrap();
        let got: Vec<_> = h
            .ops
            .iter()
            .map(|op| (op.process, op.complete, op.output.clone()))
            .collect();
        // Process 4's write never completed: indeterminate too.
        assert_eq!(got, vec![(0, None, None), (1, None, None), (4, None, None)]);
    }

    #[test]
    fn failed_writes_did_not_happen() {
        let text = [
            line("0", "invoke", "write", "1"),
            line("0", "fail", "write", "1"),
        ]
        .concat();
        assert!(parse(&text).unwrap().is_empty());
    }

    #[test]
    fn nemesis_and_other_lines_are_ignored() {
        let text = [
            "INFO  jepsen.core - Worker 0 starting\n".to_string(),
            line(":nemesis", "info", "start", "nil"),
            line("0", "invoke", "read", "nil"),
            "\n".to_string(),
            "INFO  jepsen.util - :nemesis\t:info\t:start\t\"partitioned into [(:n1) (:n2 :n3)]\"\n"
                .to_string(),
            line("0", "ok", "read", "nil"),
        ]
        .concat();
        assert_eq!(parse(&text).unwrap().len(), 1);
    }

    #[test]
    fn errors_name_the_line() {
        let bad_arg = [line("0", "invoke", "write", "nil")].concat();
        assert_eq!(parse(&bad_arg).unwrap_err().line, 1);
        let unpaired = [
            line("0", "invoke", "read", "nil"),
            line("1", "ok", "read", "nil"),
        ]
        .concat();
        assert_eq!(parse(&unpaired).unwrap_err().line, 2);
        let mismatch = [
            line("0", "invoke", "write", "1"),
            line("0", "ok", "write", "2"),
        ]
        .concat();
        assert_eq!(parse(&mismatch).unwrap_err().line, 2);
        let twice = [
            line("0", "invoke", "read", "nil"),
            line("0", "invoke", "read", "nil"),
        ]
        .concat();
        assert_eq!(parse(&twice).unwrap_err().line, 2);
        let unknown = [line("0", "invoke", "add", "1")].concat();
        let err = parse(&unknown).unwrap_err();
        assert!(err.message.contains(":add"), "{err}");
        let bad_pair = [line("0", "invoke", "cas", "[1 2 3]")].concat();
        assert_eq!(parse(&bad_pair).unwrap_err().line, 1);
    }
}
