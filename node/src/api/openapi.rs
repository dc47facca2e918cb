//! `GET /openapi.json`: the OpenAPI 3.1 document of the client port, generated from the
//! route table ([`super::routes`]) and the wire types' JSON Schema derives (schemars,
//! JSON Schema 2020-12; every named type once under `components/schemas`, referenced by
//! `$ref`). Built once, when the router is made, and served as the same bytes after.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use cairn_api::{ErrorBody, ErrorCode};
use schemars::generate::SchemaSettings;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

use super::routes::{routes, Answer, Operation, Param, ParamPlace, Route, TokenUse};

/// The document's own schema, as `/openapi.json` is listed in it.
pub type Document = Map<String, Value>;

/// Where schemars puts named schemas, so `$ref`s point into the document's components.
const SCHEMAS_PATH: &str = "/components/schemas";
const SECURITY_SCHEME: &str = "bearer";

const DESCRIPTION: &str = "A replicated memory cluster for AI agents: every write, forget, \
revoke and reinstate of a memory key is a Raft entry. The contract is docs/SPEC.md (§5 HTTP \
API, §6 operators, §8 auth); docs/api.md shows every endpoint with a real exchange. Bodies \
are JSON and unknown fields are refused; every error is {\"error\": {\"code\", \"message\", \
...details}} with the code's HTTP status. Any node accepts any request (followers relay to \
the leader).";

const BEARER_DESCRIPTION: &str = "A principal's token (`cairn_` + base64url), required by \
every operation that lists this scheme while the cluster has auth on (SPEC §8); a cluster \
without auth ignores it. Operations with an empty `security` never need one.";

static DOCUMENT: LazyLock<Bytes> = LazyLock::new(|| {
    let document = serde_json::to_vec(&document()).expect("the document serializes");
    Bytes::from(document)
});

/// Builds the document now (the router calls this at startup) instead of on first use.
pub fn build() {
    LazyLock::force(&DOCUMENT);
}

pub async fn serve() -> Response {
    let json = DOCUMENT.clone();
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

/// The OpenAPI document of every route in the table.
fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = SCHEMAS_PATH.into();
            s.meta_schema = None;
        })
        .into_generator();
    let error_body = generator.subschema_for::<ErrorBody>().to_value();
    let mut paths = Map::new();
    for route in routes() {
        let operation = operation(&mut generator, &route, &error_body);
        let methods = paths
            .entry(route.path)
            .or_insert_with(|| Value::Object(Map::new()));
        methods[route.method.as_str().to_ascii_lowercase()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "cairn",
            "version": env!("CARGO_PKG_VERSION"),
            "description": DESCRIPTION,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": paths,
        "components": {
            "schemas": generator.take_definitions(true),
            "securitySchemes": {
                SECURITY_SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": BEARER_DESCRIPTION,
                },
            },
        },
        "security": [{SECURITY_SCHEME: []}],
    })
}

fn operation(generator: &mut SchemaGenerator, route: &Route, error_body: &Value) -> Value {
    let op = &route.operation;
    let mut out = json!({
        "operationId": op.id,
        "summary": op.summary,
        "tags": [op.tag],
        "responses": responses(generator, op, error_body),
    });
    let parameters = parameters(generator, op);
    if !parameters.is_empty() {
        out["parameters"] = Value::Array(parameters);
    }
    if let Some(body) = op.body {
        out["requestBody"] = json!({
            "required": true,
            "content": {"application/json": {"schema": body(generator)}},
        });
    }
    match op.token {
        TokenUse::WhileAuthIsOn => {}
        TokenUse::Bootstrap => out["security"] = json!([{}, {SECURITY_SCHEME: []}]),
        TokenUse::Never => out["security"] = json!([]),
    }
    out
}

fn parameters(generator: &mut SchemaGenerator, op: &Operation) -> Vec<Value> {
    let mut parameters: Vec<Value> = op.params.iter().map(parameter).collect();
    if let Some(query) = op.query {
        let schema = query(generator).to_value();
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        let properties = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (name, property) in properties {
            let is_required = required.contains(&Value::String(name.clone()));
            parameters.push(json!({
                "name": name,
                "in": "query",
                "required": is_required,
                "schema": without_null(property),
            }));
        }
    }
    parameters
}

fn parameter(param: &Param) -> Value {
    let (place, required) = match param.place {
        ParamPlace::Path => ("path", true),
        ParamPlace::Header => ("header", false),
    };
    json!({
        "name": param.name,
        "in": place,
        "required": required,
        "description": param.description,
        "schema": {"type": "string", "pattern": param.pattern},
    })
}

/// An optional query parameter is left out rather than sent as `null`: the schema of
/// `Option<T>` (`T` or null, default null) becomes `T`'s.
fn without_null(mut schema: Value) -> Value {
    let null = json!({"type": "null"});
    let Some(object) = schema.as_object_mut() else {
        return schema;
    };
    if object.get("default") == Some(&Value::Null) {
        object.remove("default");
    }
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            object.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(mut any_of)) = object.remove("anyOf") {
        any_of.retain(|s| *s != null);
        match any_of.as_slice() {
            [Value::Object(only)] => object.extend(only.clone()),
            _ => {
                object.insert("anyOf".into(), Value::Array(any_of));
            }
        }
    }
    schema
}

fn responses(generator: &mut SchemaGenerator, op: &Operation, error_body: &Value) -> Value {
    let mut out = Map::new();
    match op.answer {
        Answer::Json(schema) => {
            out.insert(
                "200".into(),
                json_answer("OK", schema(generator).to_value()),
            );
        }
        Answer::JsonAlso503(schema) => {
            let schema = schema(generator).to_value();
            out.insert("200".into(), json_answer("OK", schema.clone()));
            out.insert("503".into(), json_answer("Raft has stopped", schema));
        }
        Answer::EventStream(event) => {
            out.insert(
                "200".into(),
                json!({
                    "description": "One event per change, in revision order: `id:` the revision \
                        (`REVISION:SEQ` on every event of a batch but its last), \
                        `event: change`, `data:` one JSON object of `x-event-data`'s schema",
                    "content": {"text/event-stream": {
                        "schema": {"type": "string"},
                        "x-event-data": event(generator).to_value(),
                    }},
                }),
            );
        }
        Answer::Text => {
            out.insert(
                "200".into(),
                json!({
                    "description": "OK",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }),
            );
        }
    }
    for (status, codes) in by_status(&op.errors) {
        out.insert(status.to_string(), error_answer(&codes, error_body));
    }
    Value::Object(out)
}

fn json_answer(description: &str, schema: Value) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": schema}},
    })
}

fn by_status(errors: &[ErrorCode]) -> BTreeMap<u16, Vec<ErrorCode>> {
    let mut statuses: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    for code in errors {
        statuses.entry(code.http_status()).or_default().push(*code);
    }
    statuses
}

/// The error body, its `code` narrowed to the codes this operation answers with this
/// status.
fn error_answer(codes: &[ErrorCode], error_body: &Value) -> Value {
    let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
    let narrowed = json!({
        "properties": {"error": {"properties": {"code": {"enum": names}}}},
    });
    json!({
        "description": names.join(", "),
        "content": {"application/json": {"schema": {"allOf": [error_body, narrowed]}}},
    })
}
