//! What the server does with a message it cannot hand to rmcp: one too long or nested too
//! deep to decode, or not JSON-RPC at all. rmcp drops such a message with a debug log, so
//! the client that sent it waits forever for an answer; here every such request gets one.
//!
//! - [`Incoming`] takes a message's bytes as they arrive (a stdin line, a posted body):
//!   its [`Scan`] keeps only the depth and the top-level `id` and `method` (so a message
//!   too long to keep is still answered to the request it was), and it keeps the bytes of
//!   a message short enough to decode. Both transports use it.
//! - [`Incoming::decode`] decodes the message, or gives the answer to it ([`refusal`]): a
//!   `tools/call` gets a tool result with `isError` (the model reads it and can act, as
//!   with any refused tool call), any other request a JSON-RPC error, a notification
//!   nothing.

use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, ClientRequest, ConstString,
    InitializeRequestParams, InitializeResultMethod, JsonRpcMessage, JsonRpcRequest,
    ListResourceTemplatesRequestMethod, ListResourcesRequestMethod, ListToolsRequestMethod,
    PingRequestMethod, ReadResourceRequestMethod, ReadResourceRequestParams,
    SubscribeRequestMethod, SubscribeRequestParams, SubscriptionsListenRequestMethod,
    SubscriptionsListenRequestParams, UnsubscribeRequestMethod, UnsubscribeRequestParams,
};
use rmcp::service::RxJsonRpcMessage;
use rmcp::RoleServer;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// Deepest message decoded. serde_json refuses nesting past 127 levels (its recursion
/// limit); a `tools/call` spends three (the message, `params`, `arguments`), so a value in
/// a message nests at most 124 levels. The node stores at most 120 and refuses deeper
/// values itself (400, `field: "value"`).
const MESSAGE_DEPTH_MAX: usize = 127;

/// Longest message decoded. A value is at most 1 MiB of JSON; escaped inside a JSON-RPC
/// string it can grow up to six times, so this leaves room for every value the cluster
/// accepts and bounds what one message holds in memory.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;

/// Longest top-level `id` or `method` kept while scanning (the rest is not needed).
const MEMBER_BYTES_MAX: usize = 256;

/// JSON-RPC's code for a request that is not a valid request object.
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's code for bytes that are not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for a known method's params that do not fit it.
const INVALID_PARAMS: i64 = -32602;

/// One message as its bytes arrive: all of them scanned, the first [`MESSAGE_BYTES_MAX`]
/// kept (so all of a message that may be decoded).
#[derive(Debug, Default)]
pub struct Incoming {
    scan: Scan,
    kept: Vec<u8>,
}

impl Incoming {
    pub fn push(&mut self, bytes: &[u8]) {
        self.scan.push(bytes);
        if self.scan.bytes() <= MESSAGE_BYTES_MAX {
            self.kept.extend_from_slice(bytes);
        } else if !self.kept.is_empty() {
            self.kept = Vec::new();
        }
    }

    /// Every byte pushed, kept or not.
    pub fn bytes(&self) -> usize {
        self.scan.bytes()
    }

    pub fn kept(&self) -> &[u8] {
        &self.kept
    }

    pub fn into_kept(self) -> Vec<u8> {
        self.kept
    }

    /// Decodes `message` (the kept bytes, or a trimmed slice of them), or returns the
    /// answer to send instead (`None`: a notification, which gets none), logged.
    pub fn decode(&self, message: &[u8]) -> Result<RxJsonRpcMessage<RoleServer>, Option<Value>> {
        let unreadable = match judge(&self.scan).and_then(|()| names_each_member_once(message)) {
            Err(why) => why,
            Ok(()) => match serde_json::from_slice(message) {
                Ok(decoded) => match params_fault(&decoded) {
                    None => return Ok(decoded),
                    Some(fault) => fault,
                },
                Err(err) => params_kept_from_decoding(&self.scan, message).unwrap_or(
                    Unreadable::NotJsonRpc {
                        reason: err.to_string(),
                    },
                ),
            },
        };
        let answer = refusal(&self.scan, &unreadable);
        // The sender's mistake, answered to it: not the operator's concern (docs/mcp.md).
        match answer {
            Some(_) => tracing::debug!(
                ?unreadable,
                bytes = self.bytes(),
                "answered a message that cannot be decoded"
            ),
            None => tracing::debug!(?unreadable, "ignored a notification that cannot be decoded"),
        }
        Err(answer)
    }
}

/// The depth, `id` and `method` of one message, fed its bytes in order.
///
/// Invariants:
/// - `depth` counts the objects and arrays open at the current byte, outside strings;
///   `depth_max` is the most seen, so a message is judged before it is decoded.
/// - Only members of the top-level object are captured, each up to [`MEMBER_BYTES_MAX`].
#[derive(Debug, Default)]
struct Scan {
    depth: usize,
    depth_max: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a member name.
    expect_key: bool,
    key: Vec<u8>,
    /// The top-level member whose value is being captured (`id` or `method`).
    capturing: Option<Member>,
    captured: Vec<u8>,
    id: Option<Vec<u8>>,
    method: Option<Vec<u8>>,
    bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Id,
    Method,
}

impl Scan {
    fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
        self.bytes += bytes.len();
    }

    fn byte(&mut self, byte: u8) {
        if self.capturing.is_some() && self.depth == 1 {
            self.capture(byte);
        }
        if self.in_string {
            match (self.escaped, byte) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                (false, _) if self.naming() => self.key.push(byte),
                _ => {}
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                self.key.clear();
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.depth_max = self.depth_max.max(self.depth);
                self.expect_key = self.depth == 1 && byte == b'{';
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => self.expect_key = true,
            b':' if self.depth == 1 => {
                self.expect_key = false;
                self.capturing = match self.key.as_slice() {
                    b"id" => Some(Member::Id),
                    b"method" => Some(Member::Method),
                    _ => None,
                };
                self.captured.clear();
            }
            _ => {}
        }
    }

    /// Whether the string being read is a top-level member name (kept, bounded).
    fn naming(&self) -> bool {
        self.depth == 1 && self.expect_key && self.key.len() < MEMBER_BYTES_MAX
    }

    /// Keeps the bytes of a captured member's value until a top-level `,` or `}` ends it.
    fn capture(&mut self, byte: u8) {
        let ends = !self.in_string && matches!(byte, b',' | b'}');
        if !ends {
            if self.captured.len() < MEMBER_BYTES_MAX {
                self.captured.push(byte);
            }
            return;
        }
        let value = std::mem::take(&mut self.captured);
        match self.capturing.take() {
            Some(Member::Id) => self.id = Some(value),
            Some(Member::Method) => self.method = Some(value),
            None => {}
        }
    }

    fn depth_max(&self) -> usize {
        self.depth_max
    }

    fn bytes(&self) -> usize {
        self.bytes
    }

    /// The top-level `id` when it is a number or a string (what JSON-RPC allows).
    fn id(&self) -> Option<Value> {
        let value: Value = serde_json::from_slice(self.id.as_deref()?).ok()?;
        (value.is_number() || value.is_string()).then_some(value)
    }

    fn method(&self) -> Option<String> {
        serde_json::from_slice(self.method.as_deref()?).ok()
    }
}

/// Why a message was not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unreadable {
    TooLong {
        bytes: usize,
    },
    TooDeep {
        depth: usize,
    },
    NotJsonRpc {
        reason: String,
    },
    RepeatedMember {
        reason: String,
    },
    /// A method the server serves, with params that do not fit it.
    BadParams {
        method: String,
        reason: String,
    },
}

impl Unreadable {
    /// `code: message`, as every refused tool call reads.
    fn message(&self) -> String {
        match self {
            Unreadable::TooLong { bytes } => format!(
                "too_large: message: {bytes} bytes, more than {MESSAGE_BYTES_MAX}; \
                 a value is at most 1048576 bytes of JSON"
            ),
            Unreadable::TooDeep { depth } => format!(
                "invalid_request: message: nested {depth} levels deep, more than \
                 {MESSAGE_DEPTH_MAX}; a value written through MCP nests at most {} levels",
                MESSAGE_DEPTH_MAX - 3
            ),
            Unreadable::NotJsonRpc { reason } => {
                format!("invalid_request: not a JSON-RPC message: {reason}")
            }
            Unreadable::RepeatedMember { reason } => format!(
                "invalid_request: message: {reason}; an object names each member once, in \
                 a tool's arguments as in a written value"
            ),
            Unreadable::BadParams { method, reason } => {
                format!("invalid_request: params of {method}: {reason}")
            }
        }
    }

    fn code(&self) -> i64 {
        match self {
            Unreadable::NotJsonRpc { .. } => PARSE_ERROR,
            Unreadable::BadParams { .. } => INVALID_PARAMS,
            _ => INVALID_REQUEST,
        }
    }
}

/// The requests the server serves: one of these with params that do not fit is answered
/// as bad params, not as a method the server lacks or as bytes that are not JSON-RPC.
const SERVED_METHODS: [&str; 10] = [
    InitializeResultMethod::VALUE,
    PingRequestMethod::VALUE,
    ListToolsRequestMethod::VALUE,
    CallToolRequestMethod::VALUE,
    ListResourcesRequestMethod::VALUE,
    ListResourceTemplatesRequestMethod::VALUE,
    ReadResourceRequestMethod::VALUE,
    SubscribeRequestMethod::VALUE,
    UnsubscribeRequestMethod::VALUE,
    SubscriptionsListenRequestMethod::VALUE,
];

/// The fault of a JSON request for a served method that did not decode because of its
/// `params`: MCP's params are an object (or absent), and JSON-RPC's positional params (an
/// array), or a string or number, make the whole message undecodable to rmcp.
fn params_kept_from_decoding(scan: &Scan, message: &[u8]) -> Option<Unreadable> {
    let method = scan.method()?;
    scan.id()?;
    let request: Value = serde_json::from_slice(message).ok()?;
    let reason = params_misfit(&method, request.get("params")?)?;
    Some(Unreadable::BadParams { method, reason })
}

/// The fault of a request naming a method the server serves with params that do not fit
/// it (`arguments` that are not an object, a `name` that is not a string, no `uri`). rmcp
/// decodes such a request as a custom one and answers it "method not found", which tells
/// the client the server lacks the method; here it is answered as the bad params it is.
fn params_fault(message: &RxJsonRpcMessage<RoleServer>) -> Option<Unreadable> {
    let JsonRpcMessage::Request(JsonRpcRequest {
        request: ClientRequest::CustomRequest(custom),
        ..
    }) = message
    else {
        return None;
    };
    let reason = params_misfit(
        &custom.method,
        custom.params.as_ref().unwrap_or(&Value::Null),
    )?;
    Some(Unreadable::BadParams {
        method: custom.method.clone(),
        reason,
    })
}

/// Why `params` do not fit `method`, a served method: not an object at all, or an object
/// its type refuses (`None`: they fit, or the server does not serve `method`, which rmcp
/// answers "method not found" as it should).
fn params_misfit(method: &str, params: &Value) -> Option<String> {
    if !SERVED_METHODS.contains(&method) {
        return None;
    }
    let kind = match params {
        Value::Object(_) | Value::Null => return fit_fault(method, params.clone()),
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
    };
    Some(format!("params must be an object, not {kind}"))
}

/// Why `params` do not fit `method`, for the served methods whose params rmcp decodes
/// into a type (`None`: they fit, or the method takes none of its own).
fn fit_fault(method: &str, params: Value) -> Option<String> {
    match method {
        CallToolRequestMethod::VALUE => decode_fault::<CallToolRequestParams>(params),
        ReadResourceRequestMethod::VALUE => decode_fault::<ReadResourceRequestParams>(params),
        SubscribeRequestMethod::VALUE => decode_fault::<SubscribeRequestParams>(params),
        UnsubscribeRequestMethod::VALUE => decode_fault::<UnsubscribeRequestParams>(params),
        SubscriptionsListenRequestMethod::VALUE => {
            decode_fault::<SubscriptionsListenRequestParams>(params)
        }
        InitializeResultMethod::VALUE => decode_fault::<InitializeRequestParams>(params),
        _ => None,
    }
}

fn decode_fault<T: DeserializeOwned>(params: Value) -> Option<String> {
    serde_json::from_value::<T>(params)
        .err()
        .map(|e| e.to_string())
}

/// Whether a message that scanned as `scan` may be decoded; why not otherwise.
fn judge(scan: &Scan) -> Result<(), Unreadable> {
    if scan.bytes() > MESSAGE_BYTES_MAX {
        return Err(Unreadable::TooLong {
            bytes: scan.bytes(),
        });
    }
    if scan.depth_max() > MESSAGE_DEPTH_MAX {
        return Err(Unreadable::TooDeep {
            depth: scan.depth_max(),
        });
    }
    Ok(())
}

/// Refuses a message with an object that names a member twice, at any depth: decoded, the
/// last one would win, so a tool's argument sent twice, or an object of a written value
/// (which the node itself refuses, SPEC §2), would reach the cluster as something other
/// than what was sent. Text that is not JSON passes, for the decoder to name its fault.
fn names_each_member_once(message: &[u8]) -> Result<(), Unreadable> {
    match cairn_api::value_from_slice(message) {
        Err(e) if e.to_string().starts_with("duplicate field") => Err(Unreadable::RepeatedMember {
            reason: e.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The answer to a message that could not be decoded, or `None` when there is nobody to
/// answer (a notification: it has a `method` and no `id`).
fn refusal(scan: &Scan, why: &Unreadable) -> Option<Value> {
    let message = why.message();
    match (scan.id(), scan.method()) {
        (Some(id), Some(method)) if method == "tools/call" => Some(json!({
            "jsonrpc": "2.0",
            "id": id,
            // `resultType` is required from protocol 2026-07-28 on; earlier peers ignore
            // it as a member they do not know.
            "result": {
                "content": [{"type": "text", "text": message}],
                "isError": true,
                "resultType": "complete",
            },
        })),
        (Some(id), _) => Some(json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": why.code(), "message": message},
        })),
        (None, Some(_)) => None,
        // No id to answer to: JSON-RPC's answer to what it cannot read at all.
        (None, None) => Some(json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": why.code(), "message": message},
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(text: &str) -> Scan {
        let mut scan = Scan::default();
        // In two pieces, as bytes arrive.
        let (a, b) = text.split_at(text.len() / 2);
        scan.push(a.as_bytes());
        scan.push(b.as_bytes());
        scan
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn a_scan_finds_depth_id_and_method_wherever_they_stand() {
        let text = format!(
            r#"{{"params":{{"name":"write","arguments":{{"value":{},"id":"inner","method":"x"}}}},"method":"tools/call","jsonrpc":"2.0","id":7}}"#,
            nested(5)
        );
        let scan = scanned(&text);
        assert_eq!(scan.depth_max(), 3 + 5);
        assert_eq!(scan.id(), Some(json!(7)));
        assert_eq!(scan.method().as_deref(), Some("tools/call"));
        let quoted = scanned(r#"{"id":"a,\"}b","method":"ping"}"#);
        assert_eq!(quoted.id(), Some(json!("a,\"}b")));
        assert_eq!(quoted.method().as_deref(), Some("ping"));
        assert_eq!(scanned(r#"{"id":{"x":1},"method":"ping"}"#).id(), None);
    }

    #[test]
    fn a_message_is_judged_by_its_depth_and_length() {
        let at_limit = scanned(&nested(MESSAGE_DEPTH_MAX));
        assert_eq!(judge(&at_limit), Ok(()));
        let deeper = scanned(&nested(MESSAGE_DEPTH_MAX + 1));
        assert_eq!(
            judge(&deeper),
            Err(Unreadable::TooDeep {
                depth: MESSAGE_DEPTH_MAX + 1
            })
        );
        // The limit is serde_json's: one level more does not decode.
        assert!(serde_json::from_str::<Value>(&nested(MESSAGE_DEPTH_MAX)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(MESSAGE_DEPTH_MAX + 1)).is_err());
        let mut long = Scan::default();
        long.push(&vec![b' '; MESSAGE_BYTES_MAX + 1]);
        assert_eq!(
            judge(&long),
            Err(Unreadable::TooLong {
                bytes: MESSAGE_BYTES_MAX + 1
            })
        );
    }

    #[test]
    fn a_message_naming_a_member_twice_is_refused_at_any_depth() {
        for repeated in [
            r#"{"id":1,"id":2}"#,
            r#"{"params":{"arguments":{"value":1,"value":2}}}"#,
            r#"{"params":{"arguments":{"value":[{"a":1,"b":{},"a":2}]}}}"#,
        ] {
            let refused = names_each_member_once(repeated.as_bytes());
            assert!(
                matches!(&refused, Err(Unreadable::RepeatedMember { reason }) if reason.starts_with("duplicate field")),
                "{repeated}: {refused:?}"
            );
        }
        for passes in [r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#, "not json", "{"] {
            assert_eq!(
                names_each_member_once(passes.as_bytes()),
                Ok(()),
                "{passes}"
            );
        }
    }

    #[test]
    fn a_tool_call_is_refused_as_a_tool_error_other_requests_as_json_rpc_errors() {
        let why = Unreadable::TooDeep { depth: 130 };
        let call = scanned(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}"#);
        let answer = refusal(&call, &why).unwrap();
        assert_eq!(answer["id"], 3);
        assert_eq!(answer["result"]["isError"], true);
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("invalid_request: message: nested 130 levels"),
            "{text}"
        );
        let other = scanned(r#"{"jsonrpc":"2.0","id":"r","method":"resources/read"}"#);
        assert_eq!(
            refusal(&other, &why).unwrap()["error"]["code"],
            INVALID_REQUEST
        );
        let notification = scanned(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#);
        assert_eq!(refusal(&notification, &why), None);
        let garbage = scanned("not json");
        let why = Unreadable::NotJsonRpc {
            reason: "expected value".into(),
        };
        let answer = refusal(&garbage, &why).unwrap();
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["code"], PARSE_ERROR);
    }

    fn decoded(text: &str) -> Result<RxJsonRpcMessage<RoleServer>, Option<Value>> {
        let mut incoming = Incoming::default();
        incoming.push(text.as_bytes());
        incoming.decode(incoming.kept())
    }

    /// rmcp would answer these "method not found" (-32601), as if the server lacked the
    /// method.
    #[test]
    fn a_served_method_with_params_that_do_not_fit_it_is_answered_as_bad_params() {
        for arguments in [r#""x""#, "[]", "7"] {
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"read","arguments":{arguments}}}}}"#
            );
            let answer = decoded(&text).expect_err(&text).expect("answered");
            assert_eq!(answer["result"]["isError"], true, "{text}");
            let shown = answer["result"]["content"][0]["text"].as_str().unwrap();
            assert!(
                shown.starts_with("invalid_request: params of tools/call: "),
                "{shown}"
            );
        }
        for text in [
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":null}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":5}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{}}"#,
        ] {
            let answer = decoded(text).expect_err(text).expect("answered");
            let refused =
                answer["error"]["code"] == INVALID_PARAMS || answer["result"]["isError"] == true;
            assert!(refused, "{text}: {answer}");
        }
        // Params of another JSON type than an object keep rmcp from decoding the message
        // at all: still bad params of a served method, not bytes that are not JSON-RPC.
        for (text, kind) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":[]}"#,
                "an array",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":"x"}"#,
                "a string",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":5}"#,
                "a number",
            ),
        ] {
            let answer = decoded(text).expect_err(text).expect("answered");
            assert_eq!(answer["error"]["code"], INVALID_PARAMS, "{text}: {answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.ends_with(&format!("not {kind}")), "{message}");
        }
        let meta = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{"key":"k"},"_meta":5}}"#;
        let answer = decoded(meta).expect_err(meta).expect("answered");
        let shown = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            shown.starts_with("invalid_request: params of tools/call: "),
            "{shown}"
        );
        let call = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":[]}"#;
        let answer = decoded(call).expect_err(call).expect("answered");
        let shown = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            shown,
            "invalid_request: params of tools/call: params must be an object, not an array"
        );
        // A method the server does not serve, and one whose params fit, reach rmcp.
        let unknown = r#"{"jsonrpc":"2.0","id":5,"method":"no/such","params":{"a":1}}"#;
        assert!(decoded(unknown).is_ok());
        // An unknown method's params are nobody's to judge: rmcp cannot decode positional
        // ones at all, and that stays what it is.
        let positional = r#"{"jsonrpc":"2.0","id":5,"method":"no/such","params":[1]}"#;
        let answer = decoded(positional)
            .expect_err(positional)
            .expect("answered");
        assert_eq!(answer["error"]["code"], PARSE_ERROR, "{answer}");
        let fits = r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"read","arguments":{"key":"k"}}}"#;
        assert!(decoded(fits).is_ok());
    }
}
