//! The strict JSON body extractor.
//!
//! A body that cannot be used is a typed error naming what is wrong (SPEC §5, error
//! details): over the size limit → 413 `too_large` with `field: "body"`, `limit` and
//! `size`; a decode error → 400 `invalid_request` with `field`, the JSON path of the
//! offending value (`expected_version`, `tags[2]`, `ops[1].reason`), plus `op_index` inside
//! a batch. Only a body that is not JSON at all (a syntax error) names no field.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_LENGTH;
use cairn_api::{
    ErrorCode, FlagStaleRequest, ForgetRequest, ReinstateRequest, RevokeRequest, SupersedeRequest,
    WriteRequest, EMPTY_ACTOR,
};
use cairn_config::Limits;
use cairn_memory::admit::VALUE_DEPTH_MAX;
use futures::FutureExt;
use http_body_util::BodyExt;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::Value;
use serde_path_to_error::Segment;

use super::error::ApiError;
use super::SharedApp;

/// Room for everything in a request besides the value itself.
pub const ENVELOPE_BYTES_MAX: usize = 1 << 20;

/// The largest request body accepted: the largest value plus [`ENVELOPE_BYTES_MAX`].
pub fn body_bytes_max(limits: &Limits) -> usize {
    limits.value_bytes_max + ENVELOPE_BYTES_MAX
}

/// A parsed JSON body plus its raw bytes (relayed verbatim when forwarding to the leader).
/// Unknown fields, wrong types and oversize bodies are typed errors, never partial parses.
pub struct JsonBody<T> {
    pub value: T,
    pub raw: Bytes,
}

impl<T: DeserializeOwned> FromRequest<SharedApp> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &SharedApp) -> Result<Self, ApiError> {
        let raw = read_body(req, body_bytes_max(&app.config.limits), &app.config.limits).await?;
        let value = decode(&raw).map_err(|e| sized_empty_actor(e, &app.config.limits))?;
        Ok(JsonBody { value, raw })
    }
}

/// An `actor` sent as `""` is refused while decoding (left out, it stands for the token's
/// principal), where no limits are known: it gets the `limit` and `size` that every other
/// size refusal carries (SPEC §5: an actor is 1 to 128 bytes).
fn sized_empty_actor(error: ApiError, limits: &Limits) -> ApiError {
    let on_actor = matches!(
        error.details.get("field"),
        Some(Value::String(field)) if field == "actor" || field.ends_with(".actor")
    );
    if !(on_actor && error.message.contains(EMPTY_ACTOR)) {
        return error;
    }
    error.with("limit", limits.actor_bytes_max).with("size", 0)
}

/// The request's whole body, at most `limit` bytes ([`read_limited`], told the declared
/// `Content-Length` and `limits.request_body_timeout_ms`). A client that waits to be
/// invited to send its body (`Expect: 100-continue`) and declares more than `limit` is
/// refused from the head, uninvited; any other client is read up to the limit first, so
/// that it reads the 413 rather than a connection reset mid-body.
async fn read_body(req: Request, limit: usize, limits: &Limits) -> Result<Bytes, ApiError> {
    let waits = waits_for_continue(&req);
    let (body, content_length, stall) = body_parts(req, limits);
    if waits && content_length.is_some_and(|declared| declared > limit as u64) {
        return Err(body_too_large(content_length, 0, limit));
    }
    read_limited(body, content_length, limit, stall).await
}

/// Whether the client waits for `100 Continue` before it sends its body: reading the body
/// would have the HTTP layer invite it.
fn waits_for_continue(req: &Request) -> bool {
    req.headers()
        .get(axum::http::header::EXPECT)
        .is_some_and(|expect| expect.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Reads and drops the body of a request refused before its body was looked at (at most
/// the node's body limit, with the same stall timer), so that a client still sending it
/// reads the refusal instead of a reset connection. Nothing of it is kept or decoded.
///
/// A client that waits to be told to send its body (`Expect: 100-continue`) is not told:
/// it gets the refusal at once.
pub async fn discard(req: Request, limits: &Limits) {
    if waits_for_continue(&req) {
        return;
    }
    let (body, content_length, stall) = body_parts(req, limits);
    let _ = read_frames(body, content_length, body_bytes_max(limits), stall, drop).await;
}

/// The body, its declared `Content-Length` and how long it may stall.
fn body_parts(req: Request, limits: &Limits) -> (Body, Option<u64>, Duration) {
    let content_length = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let stall = Duration::from_millis(limits.request_body_timeout_ms);
    (req.into_body(), content_length, stall)
}

/// The whole body ([`read_frames`]), in one piece.
async fn read_limited(
    body: Body,
    content_length: Option<u64>,
    limit: usize,
    stall: Duration,
) -> Result<Bytes, ApiError> {
    let mut chunks: Vec<Bytes> = Vec::new();
    let read = read_frames(body, content_length, limit, stall, |data| chunks.push(data)).await?;
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().expect("one chunk"),
        _ => {
            let mut all = Vec::with_capacity(read);
            chunks.iter().for_each(|c| all.extend_from_slice(c));
            Bytes::from(all)
        }
    })
}

/// Hands every chunk of the body to `take` and answers how many bytes it read, unless the
/// body is longer than `limit` bytes: then 413 `too_large` with `field: "body"`, `limit`
/// and `size`. Reading stops at the limit (as axum's own limit did), so without a
/// `Content-Length` the size is the bytes read by then, a lower bound, and the message
/// says so.
///
/// A body that stops arriving (nothing of it for `stall`) is 400 `invalid_request` with
/// `field: "body"`. The handler then answers without having read the body to its end, so
/// the HTTP layer closes the connection after that answer.
async fn read_frames(
    mut body: Body,
    content_length: Option<u64>,
    limit: usize,
    stall: Duration,
    mut take: impl FnMut(Bytes),
) -> Result<usize, ApiError> {
    let mut read = 0usize;
    loop {
        // A small body came with its head and is ready now: no timer is armed for it.
        let next = match body.frame().now_or_never() {
            Some(next) => next,
            None => match tokio::time::timeout(stall, body.frame()).await {
                Ok(next) => next,
                Err(_) => return Err(body_stalled(content_length, read, stall)),
            },
        };
        let Some(frame) = next else { break };
        let frame = frame.map_err(|e| ApiError::invalid(format!("unreadable body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        read += data.len();
        if read > limit {
            return Err(body_too_large(content_length, read, limit));
        }
        take(data);
    }
    Ok(read)
}

fn body_stalled(content_length: Option<u64>, read: usize, stall: Duration) -> ApiError {
    let declared = content_length.map_or(String::new(), |n| format!(" of the {n} declared"));
    ApiError::invalid(format!(
        "request body stalled: {read} bytes{declared} arrived, then nothing for {} ms \
         (limits.request_body_timeout_ms); send the whole body",
        stall.as_millis()
    ))
    .with("field", "body")
}

fn body_too_large(content_length: Option<u64>, read: usize, limit: usize) -> ApiError {
    let (message, size) = match content_length {
        Some(size) => (
            format!("request body exceeds the size limit: {size} bytes, more than {limit}"),
            size,
        ),
        None => (
            format!(
                "request body exceeds the size limit: more than {limit} bytes (reading \
                 stopped there, so the size given is a lower bound: {read} bytes)"
            ),
            read as u64,
        ),
    };
    ApiError::new(ErrorCode::TooLarge, message)
        .with("field", "body")
        .with("limit", limit)
        .with("size", size)
}

/// The body of an endpoint that takes no fields (`/cluster/compact`, a token rotation):
/// none, or a JSON object without members (`{}`). Anything else is refused like an unknown
/// field of any other body, so a misdirected request changes nothing.
pub struct NoFields;

/// What a body without fields decodes into: an object that admits no member.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// Longest body accepted where no fields are: room for `{}` and whitespace, and for an
/// unknown member to be named in the refusal.
const NO_FIELDS_BYTES_MAX: usize = 4096;

impl FromRequest<SharedApp> for NoFields {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &SharedApp) -> Result<Self, ApiError> {
        let raw = read_body(req, NO_FIELDS_BYTES_MAX, &app.config.limits).await?;
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(NoFields);
        }
        decode::<Empty>(&raw).map(|_| NoFields)
    }
}

/// Most levels of arrays and objects a body nests, the body itself counted: serde_json
/// stops at its recursion limit of 128, so a body reaching 128 levels is refused and one
/// of 127 decodes. A written value is held to fewer still ([`VALUE_DEPTH_MAX`], 120).
pub const BODY_NESTING_MAX: usize = 127;

/// Decodes a request body strictly. The fast path is plain `serde_json`; only a body that
/// fails is decoded again with its path tracked (tracking allocates for every map key).
///
/// - Every body is a JSON object: an array is refused before decoding (serde would decode
///   a struct from an array positionally, so `[]` would pass as "no fields" and `["k"]`
///   as a read of `k`), and any other JSON value is refused naming what it is.
/// - Refusals speak of JSON's types, never of the Rust ones serde names ([`in_json_terms`]).
pub fn decode<T: DeserializeOwned>(raw: &[u8]) -> Result<T, ApiError> {
    if let Some(found) = not_an_object(raw) {
        return Err(ApiError::invalid(format!(
            "invalid JSON body: expected a JSON object, found {found}"
        )));
    }
    serde_json::from_slice(raw).map_err(|e| decode_error::<T>(raw, e))
}

/// What a body that is JSON but not an object is (`None` for an object, or for text that
/// is not JSON, which serde's own message describes better).
fn not_an_object(raw: &[u8]) -> Option<&'static str> {
    let found = match raw.iter().find(|b| !b.is_ascii_whitespace())? {
        b'{' => return None,
        // Refused even when malformed further on: serde must never see it (see `decode`).
        b'[' => return Some("an array"),
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        b'-' | b'0'..=b'9' => "a number",
        _ => return None,
    };
    serde_json::from_slice::<serde::de::IgnoredAny>(raw)
        .is_ok()
        .then_some(found)
}

/// serde's message with JSON's names for what a field expected or got, where serde names
/// Rust's (`expected u64`, `expected struct WriteRequest`, `invalid type: sequence`): a
/// client sent JSON and knows nothing of the node's types.
fn in_json_terms(message: &str) -> String {
    const TERMS: [(&str, &str); 11] = [
        ("expected u64", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected u32", "expected an integer from 0 to 4294967295"),
        ("expected u16", "expected an integer from 0 to 65535"),
        ("expected u8", "expected an integer from 0 to 255"),
        ("expected i64", "expected an integer"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected a JSON object"),
        ("invalid type: sequence", "invalid type: array"),
        ("invalid type: map", "invalid type: object"),
        ("invalid type: floating point", "invalid type: number"),
    ];
    let mut plain = TERMS
        .iter()
        .fold(message.to_string(), |text, (rust, json)| {
            text.replace(rust, json)
        });
    // `expected struct WriteRequest`, `expected internally tagged enum BatchOp`: the
    // type's name ends at the next space.
    for (rust, json) in [
        ("expected struct ", "expected a JSON object"),
        ("expected internally tagged enum ", "expected a JSON object"),
        (
            "expected enum ",
            "expected a string naming one of its accepted values",
        ),
    ] {
        while let Some(start) = plain.find(rust) {
            let name_start = start + rust.len();
            let name_end = plain[name_start..]
                .find(' ')
                .map_or(plain.len(), |n| name_start + n);
            plain.replace_range(start..name_end, json);
        }
    }
    plain
}

fn decode_error<T: DeserializeOwned>(raw: &[u8], e: serde_json::Error) -> ApiError {
    if e.to_string().starts_with("recursion limit exceeded") {
        return ApiError::invalid(format!(
            "invalid JSON body: it nests deeper than {BODY_NESTING_MAX} levels of arrays and \
             objects (line {}, column {}); a body may nest at most {BODY_NESTING_MAX}, and a \
             written value at most {VALUE_DEPTH_MAX}",
            e.line(),
            e.column(),
        ))
        .with("field", "body")
        .with("limit", BODY_NESTING_MAX);
    }
    let error = ApiError::invalid(format!(
        "invalid JSON body: {}",
        in_json_terms(&e.to_string())
    ));
    // serde_json reports a value that cannot name a variant of an enum (`["active"]`, `1`
    // or `{}` where a state is expected) as a syntax error ("expected value") although
    // the body is valid JSON: that is a wrong value, and its path is named like any other.
    // Other syntax errors inside valid-looking JSON (a number out of range, a lone
    // surrogate escape) keep serde_json's own message.
    let syntax = !e.is_data();
    let wrong_variant = syntax && e.to_string().starts_with("expected value");
    if syntax && serde_json::from_slice::<serde::de::IgnoredAny>(raw).is_err() {
        // Not JSON (or cut short): there is no field to name.
        return error;
    }
    let mut de = serde_json::Deserializer::from_slice(raw);
    let Err(tracked) = serde_path_to_error::deserialize::<_, T>(&mut de) else {
        // Decoded this time: the failure was after the value (trailing data).
        return error;
    };
    let mut path = json_path(tracked.path().iter());
    let segments: Vec<&Segment> = tracked.path().iter().collect();
    let mut op_index = None;
    if let [Segment::Map { key }, Segment::Seq { index }, ..] = segments.as_slice() {
        if key == "ops" {
            // Inside a batch op. An op is tagged by `op`, and serde decodes a tagged op
            // from a buffered copy, so the path stops at `ops[i]`: decode that op again on
            // its own to find the field.
            let message = tracked.inner().to_string();
            // `None` when the op is not an object: then serde's own path stands.
            let members = op_members(raw, *index);
            let members = members.as_ref().map(|Members(m)| m.as_slice());
            let inner = match members.and_then(|m| repeated_op_member(m, &message)) {
                // serde names the member but, decoding the op from a buffered copy, not
                // where it is: the path may even point into the op's value.
                Some(member) => {
                    path.truncate(2);
                    Some(vec![member])
                }
                None => members.filter(|_| segments.len() == 2).map(batch_op_field),
            };
            match inner {
                Some(inner) => path.extend(inner),
                None => add_named_field(&mut path, &message),
            }
            op_index = Some(*index);
        }
    }
    if op_index.is_none() {
        add_named_field(&mut path, &tracked.inner().to_string());
    }
    let error = match path.first() {
        Some(PathPart::Member(_)) if wrong_variant => ApiError::invalid(format!(
            "invalid JSON body: {}: expected a string naming one of its accepted values",
            render_path(&path)
        )),
        _ => error,
    };
    let error = match op_index {
        Some(i) => without_op_request_id(error).with("op_index", i),
        None => error,
    };
    with_field(error, &path)
}

/// serde lists every member of an op's request type among those expected, `request_id`
/// too, which an op may not carry (it belongs on the batch): a batch op's refusal leaves
/// it out of the list.
fn without_op_request_id(mut error: ApiError) -> ApiError {
    for listed in [", `request_id`", "`request_id`, "] {
        error.message = error.message.replace(listed, "");
    }
    error
}

/// `field` for a non-empty path into an object body (a struct also decodes from an
/// array, positionally, but such a body has no field names to give).
fn with_field(error: ApiError, path: &[PathPart]) -> ApiError {
    match path.first() {
        Some(PathPart::Member(_)) => error.with("field", render_path(path)),
        _ => error,
    }
}

/// One step of a JSON path: a member name or an array index.
#[derive(Debug, Clone, PartialEq)]
enum PathPart {
    Member(String),
    Index(usize),
}

fn json_path<'a>(segments: impl Iterator<Item = &'a Segment>) -> Vec<PathPart> {
    segments
        .filter_map(|s| match s {
            Segment::Map { key } => Some(PathPart::Member(key.clone())),
            Segment::Seq { index } => Some(PathPart::Index(*index)),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// `a.b[2].c`, as the validation errors of `limits.rs` spell fields.
fn render_path(path: &[PathPart]) -> String {
    let mut out = String::new();
    for part in path {
        match part {
            PathPart::Member(name) if out.is_empty() => out.push_str(name),
            PathPart::Member(name) => {
                out.push('.');
                out.push_str(name);
            }
            PathPart::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Ends `path` with the member a serde error names when the path stops short of it: a
/// missing field is reported at its parent (an unknown one usually is not).
fn add_named_field(path: &mut Vec<PathPart>, message: &str) {
    let named = ["missing field `", "unknown field `", "duplicate field `"]
        .iter()
        .find_map(|prefix| member_named(message, prefix))
        .map(|name| PathPart::Member(name.to_string()));
    if let Some(named) = named {
        if path.last() != Some(&named) {
            path.push(named);
        }
    }
}

/// The member a serde message that starts with `prefix` (``"duplicate field `"``) names.
fn member_named<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    message.strip_prefix(prefix)?.split('`').next()
}

/// The path inside a batch op that fails to decode, given the op's `members` as sent. The
/// op is decoded again from its own text, so a member named twice inside its value is
/// still there to be found (a parsed copy would keep only the last one).
fn batch_op_field(members: &[(String, &RawValue)]) -> Vec<PathPart> {
    let name = members
        .iter()
        .find(|(member, _)| member == "op")
        .and_then(|(_, tag)| serde_json::from_str::<String>(tag.get()).ok());
    let Some(name) = name else {
        // Missing, or not a string: the tag itself is the problem.
        return vec![PathPart::Member("op".into())];
    };
    let rest: Vec<String> = members
        .iter()
        .filter(|(member, _)| member != "op")
        .map(|(member, value)| format!("{}:{}", Value::from(member.as_str()), value.get()))
        .collect();
    let op = format!("{{{}}}", rest.join(","));
    let inner = match name.as_str() {
        "write" => tracked_path::<WriteRequest>(&op),
        "forget" => tracked_path::<ForgetRequest>(&op),
        "revoke" => tracked_path::<RevokeRequest>(&op),
        "reinstate" => tracked_path::<ReinstateRequest>(&op),
        "flag_stale" => tracked_path::<FlagStaleRequest>(&op),
        "supersede" => tracked_path::<SupersedeRequest>(&op),
        _ => return vec![PathPart::Member("op".into())],
    };
    inner.unwrap_or_default()
}

/// The members of one JSON object, in order, each as often as it was sent.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for InOrder<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(InOrder(std::marker::PhantomData))
    }
}

/// The members of op `index` of a batch body, as sent.
fn op_members(raw: &[u8], index: usize) -> Option<Members<'_>> {
    #[derive(serde::Deserialize)]
    struct Ops<'a> {
        #[serde(borrow)]
        ops: Vec<&'a RawValue>,
    }
    let body: Ops = serde_json::from_slice(raw).ok()?;
    serde_json::from_str(body.ops.get(index)?.get()).ok()
}

/// The member a "duplicate field" `message` names, when the op's own `members` (not its
/// value) name it twice.
fn repeated_op_member(members: &[(String, &RawValue)], message: &str) -> Option<PathPart> {
    let name = member_named(message, "duplicate field `")?;
    let times = members.iter().filter(|(member, _)| member == name).count();
    (times > 1).then(|| PathPart::Member(name.to_string()))
}

/// The path of the error the JSON `text` meets when decoded as `T`, if it fails.
fn tracked_path<T: DeserializeOwned>(text: &str) -> Option<Vec<PathPart>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let e = serde_path_to_error::deserialize::<_, T>(&mut de).err()?;
    let mut path = json_path(e.path().iter());
    add_named_field(&mut path, &e.inner().to_string());
    Some(path)
}

/// A query string parsed strictly; unknown parameters are a typed 400, like body fields.
///
/// A parameter of `T` given with an empty value (`?prefix=&from_revision=`, as the
/// documented templates read) is absent: it takes its default. A non-empty value that does
/// not parse, and any unknown parameter (empty or not), is 400 `invalid_request` naming it.
pub struct StrictQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        let raw = parts.uri.query().unwrap_or("");
        if let Some((name, reason)) = undecodable_param(raw) {
            return Err(
                ApiError::invalid(format!("invalid query string: {name} {reason}"))
                    .with("field", name),
            );
        }
        let query = without_empty_params(raw, struct_fields::<T>());
        let uri: axum::http::Uri = format!("/?{query}")
            .parse()
            .map_err(|_| ApiError::invalid("invalid query string"))?;
        axum::extract::Query::<T>::try_from_uri(&uri)
            .map(|q| StrictQuery(q.0))
            .map_err(|rejection| {
                let error = ApiError::invalid(format!(
                    "invalid query string: {}",
                    query_refusal(&rejection.body_text())
                ));
                with_field(error, &query_error_path(&rejection))
            })
    }
}

/// axum's words for a query it could not decode, without its own prefix (the message
/// already says "invalid query string") and in JSON's terms like a body's.
fn query_refusal(text: &str) -> String {
    let reason = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(text);
    in_json_terms(reason)
}

/// The first query parameter whose name or value does not percent-decode, with what is
/// wrong: a `%` not followed by two hex digits (`?prefix=%zz`), or bytes that are not
/// UTF-8 once decoded (`?prefix=%FF`). The form decoder would keep the first as it was
/// sent and read the second as U+FFFD: either way a prefix the client never meant would
/// be served. A name that decodes is named decoded; one that does not, as it was sent.
fn undecodable_param(query: &str) -> Option<(String, &'static str)> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name_bytes = percent_decoded(name);
        let value_bytes = percent_decoded(value);
        let shown = name_bytes
            .as_ref()
            .and_then(|bytes| String::from_utf8(bytes.clone()).ok())
            .unwrap_or_else(|| name.to_string());
        let (Some(name_bytes), Some(value_bytes)) = (name_bytes, value_bytes) else {
            return Some((shown, "has a % not followed by two hex digits"));
        };
        let utf8 =
            std::str::from_utf8(&name_bytes).is_ok() && std::str::from_utf8(&value_bytes).is_ok();
        (!utf8).then_some((shown, "is not UTF-8 once percent-decoded"))
    })
}

/// `text` with `%XX` escapes decoded and `+` read as a space, as a form decoder reads it;
/// `None` when a `%` is not followed by two hex digits.
fn percent_decoded(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                // Two hex digits, checked as such: `from_str_radix` also takes a sign.
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    Some(out)
}

/// `query` without the parameters named in `fields` whose value is empty (`name=` or a
/// bare `name`). Names are compared as sent (a percent-encoded name is kept, and decoded
/// and judged as before).
fn without_empty_params(query: &str, fields: &[&str]) -> String {
    query
        .split('&')
        .filter(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            !(value.is_empty() && fields.contains(&name))
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The field names of a struct `T` deserializes from (serde's derive hands them to
/// `deserialize_struct`); empty for any other type.
fn struct_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{self, Visitor};
    struct Fields<'a>(&'a std::cell::Cell<&'static [&'static str]>);
    impl<'de> de::Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.set(fields);
            Err(de::Error::custom("fields read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let fields = std::cell::Cell::new(&[][..]);
    let _ = T::deserialize(Fields(&fields));
    fields.get()
}

/// Path parameters, whose rejection is the client port's error body (axum's own answers
/// plain text).
pub struct StrictPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> axum::extract::FromRequestParts<S>
    for StrictPath<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| StrictPath(p.0))
            .map_err(path_rejection)
    }
}

/// A path parameter that cannot be decoded (not UTF-8, not of its type): 400
/// `invalid_request` naming the parameter (`field`).
fn path_rejection(rejection: axum::extract::rejection::PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    use axum::extract::rejection::PathRejection;
    let error = ApiError::invalid(format!("invalid path: {}", rejection.body_text()));
    let key = match &rejection {
        PathRejection::FailedToDeserializePathParams(e) => match e.kind() {
            ErrorKind::InvalidUtf8InPathParam { key }
            | ErrorKind::ParseErrorAtKey { key, .. }
            | ErrorKind::DeserializeError { key, .. } => Some(key.clone()),
            _ => None,
        },
        _ => None,
    };
    error.with("field", key.unwrap_or_else(|| "path".to_string()))
}

/// The parameter a query string error is about. axum decodes queries through
/// `serde_path_to_error` too and keeps its error as the rejection's source's source.
fn query_error_path(rejection: &axum::extract::rejection::QueryRejection) -> Vec<PathPart> {
    use std::error::Error;
    type Tracked = serde_path_to_error::Error<serde::de::value::Error>;
    let Some(tracked) = rejection
        .source()
        .and_then(|e| e.source())
        .and_then(|e| e.downcast_ref::<Tracked>())
    else {
        return Vec::new();
    };
    let mut path = json_path(tracked.path().iter());
    add_named_field(&mut path, &tracked.inner().to_string());
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_api::{BatchRequest, ListRequest, ReadRequest};
    use futures::StreamExt;
    use serde_json::json;

    /// The details of the error decoding `body` as `T`.
    fn details<T: DeserializeOwned + std::fmt::Debug>(body: &str) -> Value {
        let e = decode::<T>(body.as_bytes()).expect_err("a decode error");
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{e:?}");
        assert!(e.message.starts_with("invalid JSON body: "), "{e:?}");
        Value::Object(e.details)
    }

    /// A write body whose value is `depth` arrays deep.
    fn write_nested(depth: usize) -> String {
        format!(
            r#"{{"key":"k","actor":"a","value":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    }

    #[test]
    fn nesting_is_bounded_and_the_refusal_says_by_what() {
        // The body's object and the value's arrays: a body of BODY_NESTING_MAX levels
        // decodes, one level more is refused. serde_json's own limit: if it moves, this
        // test tells the documented numbers to.
        let deepest = BODY_NESTING_MAX - 1;
        assert!(decode::<WriteRequest>(write_nested(deepest).as_bytes()).is_ok());
        assert_eq!(
            details::<WriteRequest>(&write_nested(deepest + 1)),
            json!({"field": "body", "limit": BODY_NESTING_MAX})
        );
        let e = decode::<WriteRequest>(write_nested(deepest + 1).as_bytes()).expect_err("deep");
        assert!(
            e.message.starts_with(
                "invalid JSON body: it nests deeper than 127 levels of arrays and objects \
                 (line 1, column"
            ),
            "{}",
            e.message
        );
        assert!(
            e.message
                .ends_with("a body may nest at most 127, and a written value at most 120"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_body_without_fields_is_none_or_an_empty_object_never_an_array() {
        assert!(decode::<Empty>(b"{}").is_ok());
        assert!(decode::<Empty>(b" { } ").is_ok());
        for body in ["[]", " [ ] ", "[1]", "7", "null", "\"\""] {
            let e = decode::<Empty>(body.as_bytes()).expect_err(body);
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{body}");
        }
        assert_eq!(details::<Empty>(r#"{"x":1}"#), json!({"field": "x"}));
        assert_eq!(details::<ReadRequest>(r#"["k"]"#), json!({}));
    }

    #[test]
    fn a_missing_unknown_or_repeated_field_is_named() {
        assert_eq!(
            details::<ForgetRequest>(r#"{"key":"h/1","actor":"al"}"#),
            json!({"field": "reason"})
        );
        assert_eq!(
            details::<WriteRequest>(r#"{"key":"k","value":1,"actor":"a","bogus":1}"#),
            json!({"field": "bogus"})
        );
        assert_eq!(
            details::<WriteRequest>(r#"{"key":"k","value":1,"key":"j","actor":"a"}"#),
            json!({"field": "key"})
        );
        assert_eq!(
            details::<WriteRequest>(r#"{"key":"k","value":1,"actor":""}"#),
            json!({"field": "actor"})
        );
    }

    #[test]
    fn a_member_repeated_in_a_batch_op_is_named_where_it_is() {
        for (op, field) in [
            (
                r#"{"op":"write","key":"a","key":"b","value":1,"actor":"a"}"#,
                "ops[1].key",
            ),
            (
                r#"{"op":"write","key":"a","value":1,"actor":"a","tags":["x"],"tags":["y"]}"#,
                "ops[1].tags",
            ),
            (
                r#"{"op":"write","op":"forget","key":"a","value":1,"actor":"a"}"#,
                "ops[1].op",
            ),
            (
                r#"{"op":"write","op":"write","key":"a","value":1,"actor":"a"}"#,
                "ops[1].op",
            ),
            (
                r#"{"op":"forget","key":"a","actor":"a","reason":"r","reason":"s"}"#,
                "ops[1].reason",
            ),
            // Inside the op's value, the path goes on into it.
            (
                r#"{"op":"write","key":"a","value":{"b":{"c":1,"c":2}},"actor":"a"}"#,
                "ops[1].value.b.c",
            ),
        ] {
            let body =
                format!(r#"{{"ops":[{{"op":"write","key":"z","value":1,"actor":"a"}},{op}]}}"#);
            let e = decode::<BatchRequest>(body.as_bytes()).expect_err(&body);
            assert!(e.message.contains("duplicate field"), "{body}: {e:?}");
            assert_eq!(
                Value::Object(e.details),
                json!({"field": field, "op_index": 1}),
                "{body}"
            );
        }
    }

    #[test]
    fn a_wrong_type_or_variant_is_named_by_its_path() {
        assert_eq!(
            details::<WriteRequest>(r#"{"key":"k","value":1,"actor":"a","expected_version":"x"}"#),
            json!({"field": "expected_version"})
        );
        assert_eq!(
            details::<WriteRequest>(r#"{"key":"k","value":1,"actor":"a","tags":["t",3]}"#),
            json!({"field": "tags[1]"})
        );
        assert_eq!(
            details::<ReadRequest>(r#"{"key":"k","consistency":"bogus"}"#),
            json!({"field": "consistency"})
        );
        assert_eq!(
            details::<ListRequest>(r#"{"states":["active","gone"]}"#),
            json!({"field": "states[1]"})
        );
    }

    #[test]
    fn a_value_that_names_no_variant_is_named_by_its_path() {
        for bad in [r#"["active"]"#, "1", "{}", "null", "true"] {
            let body = format!(r#"{{"prefix":"","states":[{bad}]}}"#);
            let e = decode::<ListRequest>(body.as_bytes()).expect_err(&body);
            assert_eq!(
                Value::Object(e.details.clone()),
                json!({"field": "states[0]"}),
                "{body}"
            );
            assert!(
                e.message.starts_with("invalid JSON body: states[0]"),
                "{e:?}"
            );
            assert!(!e.message.contains("expected value"), "{body}: {e:?}");
        }
        assert_eq!(
            details::<ReadRequest>(r#"{"key":"k","consistency":["any"]}"#),
            json!({"field": "consistency"})
        );
        assert_eq!(
            details::<cairn_api::RecallRequest>(r#"{"cues":["tag:x"],"include":[["active"]]}"#),
            json!({"field": "include[0]"})
        );
        // A body cut short is still no field's fault.
        assert_eq!(
            details::<ListRequest>(r#"{"prefix":"","states":["#),
            json!({})
        );
    }

    #[test]
    fn a_number_out_of_range_or_a_lone_surrogate_keeps_its_own_message() {
        for (value, said) in [
            ("1e400", "number out of range"),
            (r#""\ud800""#, "hex escape"),
        ] {
            let body = format!(r#"{{"key":"k","actor":"a","value":{value}}}"#);
            let e = decode::<WriteRequest>(body.as_bytes()).expect_err(&body);
            assert!(e.message.contains(said), "{body}: {e:?}");
            assert!(!e.message.contains("accepted values"), "{body}: {e:?}");
        }
    }

    #[test]
    fn refusals_name_json_types_never_rust_ones() {
        let write = |member: &str| format!(r#"{{"key":"k","value":1,"actor":"a",{member}}}"#);
        for (body, said) in [
            ("5".to_string(), "expected a JSON object, found a number"),
            (
                " \"k\"".to_string(),
                "expected a JSON object, found a string",
            ),
            ("null".to_string(), "expected a JSON object, found null"),
            (
                "true".to_string(),
                "expected a JSON object, found a boolean",
            ),
            (
                write(r#""expected_version":-1"#),
                "integer `-1`, expected a non-negative integer",
            ),
            (
                write(r#""expected_version":1.5"#),
                "invalid type: number `1.5`, expected a non-negative integer",
            ),
            (
                write(r#""anchors":{}"#),
                "invalid type: object, expected an array",
            ),
            (write(r#""tags":"t""#), "expected an array"),
        ] {
            let e = decode::<WriteRequest>(body.as_bytes()).expect_err(&body);
            assert!(e.message.contains(said), "{body}: {}", e.message);
            for rust in ["u64", "struct", "sequence", " map", "floating point"] {
                assert!(!e.message.contains(rust), "{body}: {}", e.message);
            }
        }
        assert_eq!(
            in_json_terms("invalid type: integer `5`, expected struct Grant at line 1 column 9"),
            "invalid type: integer `5`, expected a JSON object at line 1 column 9"
        );
        let op = decode::<BatchRequest>(br#"{"ops":[5]}"#).expect_err("not an op");
        assert!(
            op.message
                .ends_with("expected a JSON object at line 1 column 9"),
            "{}",
            op.message
        );
        // Not JSON: serde's own words, not a guess at a type.
        let e = decode::<WriteRequest>(b"tru").expect_err("not JSON");
        assert!(!e.message.contains("found a boolean"), "{}", e.message);
    }

    #[test]
    fn a_body_that_is_not_a_json_object_names_no_field() {
        let trailing = r#"{"key":"k","value":1,"actor":"a"} {}"#;
        for body in [
            "",
            "{\"key\": ",
            "not json",
            "[1,2]",
            "[]",
            " [\"k\", 1, \"a\"]",
            "\"k\"",
            "7",
            trailing,
        ] {
            let e = decode::<WriteRequest>(body.as_bytes()).expect_err("a decode error");
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{body}");
            assert!(e.details.get("field").is_none(), "{body}: {e:?}");
        }
    }

    #[test]
    fn a_decode_error_inside_a_batch_op_names_the_op_and_the_field() {
        let op = r#"{"op":"write","key":"bq/1","value":1,"actor":"al"}"#;
        let cases = [
            (
                r#"{"op":"write","key":"bq/2","value":1,"actor":"al","expected_version":"x"}"#,
                "ops[1].expected_version",
            ),
            (
                r#"{"op":"forget","key":"k","actor":"a","reason":"r","bogus":1}"#,
                "ops[1].bogus",
            ),
            (r#"{"op":"forget","key":"k","actor":"a"}"#, "ops[1].reason"),
            (r#"{"op":"erase","key":"k"}"#, "ops[1].op"),
            (r#"{"key":"k","actor":"a"}"#, "ops[1].op"),
            (r#"{"op":7,"key":"k"}"#, "ops[1].op"),
            (
                r#"{"op":"write","key":"k","value":1,"actor":"a","tags":["t",1]}"#,
                "ops[1].tags[1]",
            ),
            (
                r#"{"op":"flag_stale","key":"k","actor":"a","anchor":"tag:x"}"#,
                "ops[1].observed_hash",
            ),
            (r#"{"op":"supersede","key":"k","actor":"a"}"#, "ops[1].by"),
            (r#"{"op":"reinstate","key":"k","actor":[]}"#, "ops[1].actor"),
            (r#"{"op":"revoke","key":"k","actor":"a"}"#, "ops[1].reason"),
            ("3", "ops[1]"),
            (
                r#"{"op":"write","key":"k","value":{"a":1,"a":2},"actor":"a"}"#,
                "ops[1].value.a",
            ),
            (
                r#"{"actor":"a","value":[1,{"b":{"c":1,"c":1}}],"key":"k","op":"write"}"#,
                "ops[1].value[1].b.c",
            ),
        ];
        for (bad, field) in cases {
            let body = format!(r#"{{"ops":[{op},{bad}]}}"#);
            assert_eq!(
                details::<BatchRequest>(&body),
                json!({"field": field, "op_index": 1}),
                "{body}"
            );
        }
        assert_eq!(
            details::<BatchRequest>(r#"{"ops":{}}"#),
            json!({"field": "ops"})
        );
        assert_eq!(details::<BatchRequest>("{}"), json!({"field": "ops"}));
    }

    async fn query_details(uri: &str) -> Value {
        let request = Request::builder().uri(uri).body(()).unwrap();
        let (mut parts, ()) = request.into_parts();
        type Query = StrictQuery<cairn_api::ReadOptions>;
        let decoded =
            <Query as axum::extract::FromRequestParts<()>>::from_request_parts(&mut parts, &())
                .await;
        let Err(e) = decoded else {
            panic!("{uri}: decoded");
        };
        assert!(e.message.starts_with("invalid query string: "), "{e:?}");
        assert!(!e.message.contains("Failed to deserialize"), "{e:?}");
        Value::Object(e.details)
    }

    #[tokio::test]
    async fn a_query_value_that_is_not_utf8_is_refused_naming_it() {
        assert_eq!(
            query_details("/x?consistency=any&min_revision=%FF").await,
            json!({"field": "min_revision"})
        );
        assert_eq!(
            query_details("/x?consistency=%E2%82").await,
            json!({"field": "consistency"})
        );
        assert_eq!(
            query_details("/x?consistency=any&%FFx=1").await,
            json!({"field": "%FFx"})
        );
        assert_eq!(percent_decoded("a%2Fb+c%7a"), Some(b"a/b cz".to_vec()));
        assert_eq!(undecodable_param("prefix=%C3%A9&x=%41"), None);
    }

    #[tokio::test]
    async fn a_percent_without_two_hex_digits_is_refused_naming_its_parameter() {
        for uri in [
            "/x?consistency=any&min_revision=%zz",
            "/x?min_revision=%",
            "/x?min_revision=1%4",
            "/x?min_revision=%+1",
        ] {
            assert_eq!(
                query_details(uri).await,
                json!({"field": "min_revision"}),
                "{uri}"
            );
        }
        assert_eq!(
            query_details("/x?consistency=any&a%zz=1").await,
            json!({"field": "a%zz"})
        );
        for text in ["%", "%4", "%zz", "a%g1", "%+1", "%-1"] {
            assert_eq!(percent_decoded(text), None, "{text}");
        }
    }

    #[tokio::test]
    async fn a_query_string_error_names_the_parameter() {
        assert_eq!(
            query_details("/x?min_revision=abc").await,
            json!({"field": "min_revision"})
        );
        assert_eq!(
            query_details("/x?consistency=any&bogus=1").await,
            json!({"field": "bogus"})
        );
        assert_eq!(
            query_details("/x?consistency=sometimes").await,
            json!({"field": "consistency"})
        );
    }

    async fn query(uri: &str) -> Result<cairn_api::ReadOptions, ApiError> {
        let request = Request::builder().uri(uri).body(()).unwrap();
        let (mut parts, ()) = request.into_parts();
        type Query = StrictQuery<cairn_api::ReadOptions>;
        <Query as axum::extract::FromRequestParts<()>>::from_request_parts(&mut parts, &())
            .await
            .map(|q| q.0)
    }

    #[tokio::test]
    async fn an_empty_query_parameter_is_absent_but_an_unknown_one_is_refused() {
        let absent = query("/x?consistency=&max_staleness_ms=&min_revision=")
            .await
            .expect("empty values are absent");
        assert_eq!(absent, cairn_api::ReadOptions::default());
        let some = query("/x?consistency=any&min_revision&max_staleness_ms=5")
            .await
            .expect("a bare name is absent too");
        assert_eq!(
            (some.consistency, some.min_revision, some.max_staleness_ms),
            (Some(cairn_api::Consistency::Any), None, Some(5))
        );
        assert_eq!(
            query_details("/x?min_revision=&bogus=").await,
            json!({"field": "bogus"})
        );
        assert_eq!(
            query_details("/x?max_staleness_ms=x").await,
            json!({"field": "max_staleness_ms"})
        );
        assert_eq!(
            struct_fields::<cairn_api::ReadOptions>(),
            ["consistency", "max_staleness_ms", "min_revision"]
        );
        assert!(struct_fields::<u64>().is_empty());
    }

    /// A body-read deadline no test here comes near.
    const PATIENT: Duration = Duration::from_secs(60);

    async fn read(body: Body, content_length: Option<u64>, limit: usize) -> Value {
        let e = read_limited(body, content_length, limit, PATIENT)
            .await
            .expect_err("too large");
        assert_eq!(e.code, ErrorCode::TooLarge);
        Value::Object(e.details)
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_with_its_size() {
        let ok = read_limited(Body::from("x".repeat(10)), Some(10), 10, PATIENT)
            .await
            .expect("a body at the limit");
        assert_eq!(ok.len(), 10);
        assert_eq!(
            read(Body::from("x".repeat(11)), Some(11), 10).await,
            json!({"field": "body", "limit": 10, "size": 11})
        );
        // No Content-Length (chunked): what was read before stopping, a lower bound.
        let chunks = (0..5).map(|_| Ok::<_, std::io::Error>(Bytes::from("x".repeat(4))));
        let streamed = Body::from_stream(futures::stream::iter(chunks));
        assert_eq!(
            read(streamed, None, 10).await,
            json!({"field": "body", "limit": 10, "size": 12})
        );
        let chunks = (0..3).map(|_| Ok::<_, std::io::Error>(Bytes::from("ab")));
        let joined = read_limited(
            Body::from_stream(futures::stream::iter(chunks)),
            None,
            10,
            PATIENT,
        )
        .await
        .expect("under the limit");
        assert_eq!(&joined[..], b"ababab");
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_is_refused_naming_what_came() {
        let stall = Duration::from_millis(50);
        let first = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from("{\"key\""))]);
        let stalled = Body::from_stream(first.chain(futures::stream::pending()));
        let e = read_limited(stalled, Some(5000), 10_000, stall)
            .await
            .expect_err("a stalled body");
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(Value::Object(e.details), json!({"field": "body"}));
        assert!(
            e.message
                .contains("6 bytes of the 5000 declared arrived, then nothing for 50 ms"),
            "{}",
            e.message
        );
        // A slow body that keeps coming is read whole.
        let slow = futures::stream::iter(0..3).then(|_| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, std::io::Error>(Bytes::from("ab"))
        });
        let whole = read_limited(Body::from_stream(slow), None, 10, stall)
            .await
            .expect("a slow but steady body");
        assert_eq!(&whole[..], b"ababab");
    }
}
