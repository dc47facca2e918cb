//! The resource template `cairn://key/{key}`: reading a key as a resource, and the change
//! feed (`GET /v1/watch`) turned into `notifications/resources/updated` for the keys a
//! client subscribed to.
//!
//! A key may contain `/` (`project/db`), so everything after `cairn://key/` is the key,
//! percent-decoded: `cairn://key/project/db` and `cairn://key/project%2Fdb` name the
//! same key. A change is notified under every URI the client subscribed to its key with
//! ([`Subscriptions`]), since clients match notifications by exact URI.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;

use cairn_client::api::{ReadOptions, WatchEvent};
use cairn_client::{ClientError, WatchStream};
use futures::StreamExt;
use rmcp::model::{ReadResourceResult, ResourceContents, ResourceTemplate};
use rmcp::ErrorData;

use crate::gateway::Caller;

pub const URI_PREFIX: &str = "cairn://key/";
pub const URI_TEMPLATE: &str = "cairn://key/{key}";

/// The template `resources/templates/list` shows.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new(URI_TEMPLATE, "cairn key")
        .with_title("A cairn memory key")
        .with_description(
            "The key's rendered note (a revoked note as its warning, a forgotten one as its \
             tombstone) as text/plain, then the full record as application/json. Subscribe \
             to be told when the key changes.",
        )
        .with_mime_type("text/plain")
}

/// The key a `cairn://key/...` URI names.
pub fn key_of(uri: &str) -> Result<String, ErrorData> {
    let encoded = uri
        .strip_prefix(URI_PREFIX)
        .filter(|rest| !rest.is_empty())
        .ok_or_else(|| {
            ErrorData::invalid_params(
                format!("{uri:?} is not a cairn key URI ({URI_TEMPLATE})"),
                None,
            )
        })?;
    percent_decode(encoded).ok_or_else(|| {
        ErrorData::invalid_params(
            format!("{uri:?}: the key is not valid percent-encoded UTF-8"),
            None,
        )
    })
}

/// The subscribed URIs of one session or listen stream, by the key each names.
///
/// - A change of a key is notified under each URI subscribed to it, exactly as the
///   client wrote it (`cairn://key/a%2Fb` and `cairn://key/a/b` both, if both were used).
/// - Unsubscribing any URI of a key ends every subscription to that key.
#[derive(Debug, Default)]
pub struct Subscriptions {
    uris_by_key: HashMap<String, BTreeSet<String>>,
}

impl Subscriptions {
    /// The subscriptions of `uris`; a URI that names no key is left out (a listen
    /// request's filter only keeps URIs that do, see `accepted_subscription_filter`).
    pub fn of_uris<'a>(uris: impl IntoIterator<Item = &'a String>) -> Subscriptions {
        let mut subscriptions = Subscriptions::default();
        for uri in uris {
            // Refused URIs are not part of the accepted filter, so there is nothing to do.
            let _named_no_key = subscriptions.add(uri);
        }
        subscriptions
    }

    /// Subscribes `uri`, or says why it names no key.
    pub fn add(&mut self, uri: &str) -> Result<(), ErrorData> {
        let key = key_of(uri)?;
        self.uris_by_key
            .entry(key)
            .or_default()
            .insert(uri.to_owned());
        Ok(())
    }

    /// Ends the subscriptions to the key `uri` names, under whatever URI they were made.
    pub fn remove(&mut self, uri: &str) -> Result<(), ErrorData> {
        self.uris_by_key.remove(&key_of(uri)?);
        Ok(())
    }

    /// The URIs a change of `key` is notified under (none if it is not subscribed).
    pub fn uris(&self, key: &str) -> Vec<String> {
        self.uris_by_key
            .get(key)
            .map(|uris| uris.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.uris_by_key.is_empty()
    }
}

/// `resources/read` of a key: the rendered note, then the record as JSON.
pub async fn read(caller: &Caller, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let key = key_of(uri)?;
    let answer = caller
        .client()
        .read(&key, ReadOptions::default())
        .await
        .map_err(|err| resource_error(uri, err))?;
    let json = serde_json::to_string(&answer)
        .map_err(|e| ErrorData::internal_error(format!("encode {uri}: {e}"), None))?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(answer.record.rendered.clone(), uri).with_mime_type("text/plain"),
        ResourceContents::text(json, uri).with_mime_type("application/json"),
    ]))
}

/// Whether `caller` may read the key `uri` names, asked of the cluster: a probe of the key
/// (`POST /v1/probe`) needs the same `read` grant as a read, is authorized by the node as
/// the read is, and carries no value. A key never written is readable (the probe answers
/// it, a subscription may wait for its first write); every refusal is the error
/// [`read`] of `uri` would get (`permission_denied`, `unauthenticated`, `no_leader`,
/// "cairn cluster unavailable", ...).
pub async fn may_read(caller: &Caller, uri: &str) -> Result<(), ErrorData> {
    let key = key_of(uri)?;
    match caller.client().probe(&key, ReadOptions::default()).await {
        Ok(_) | Err(ClientError::NotFound { .. }) => Ok(()),
        Err(err) => Err(resource_error(uri, err)),
    }
}

/// [`may_read`] of every URI of `uris` that names a key, a few at a time: the first
/// refusal, in the order of `uris`, refuses them all (a URI that names no key is left out,
/// as the listen filter leaves it out).
pub async fn may_read_all(caller: &Caller, uris: &[String]) -> Result<(), ErrorData> {
    let named: Vec<&String> = uris.iter().filter(|uri| key_of(uri).is_ok()).collect();
    for some in named.chunks(PROBES_AT_ONCE) {
        let mut checks = Vec::with_capacity(some.len());
        for uri in some {
            checks.push(may_read(caller, uri));
        }
        futures::future::join_all(checks)
            .await
            .into_iter()
            .collect::<Result<Vec<()>, ErrorData>>()?;
    }
    Ok(())
}

/// How many keys of one `subscriptions/listen` request are checked at once.
const PROBES_AT_ONCE: usize = 8;

fn resource_error(uri: &str, err: ClientError) -> ErrorData {
    match err {
        // "Resource not found", with the URI: rmcp sends it as -32602 to 2026-07-28
        // peers (SEP-2164) and as -32002 to earlier ones.
        ClientError::NotFound { .. } => ErrorData::resource_not_found(
            format!("{uri}: the key was never written"),
            Some(serde_json::json!({ "uri": uri })),
        ),
        ClientError::InvalidRequest { .. } => ErrorData::invalid_params(err.to_string(), None),
        // As a tool call's: no node answered at all.
        err if crate::outcome::unreachable(&err) => {
            ErrorData::internal_error(format!("cairn cluster unavailable: {err}"), None)
        }
        // The message starts with the SPEC §5 code (`permission_denied: ...`).
        err => ErrorData::internal_error(err.to_string(), None),
    }
}

/// Opens the change feed of every key `caller` may read, from now on.
pub async fn watch(caller: &Caller) -> Result<WatchStream, ErrorData> {
    caller
        .client()
        .watch(None, None)
        .await
        .map_err(|err| ErrorData::internal_error(format!("open the change feed: {err}"), None))
}

/// Sends `notify(uri)` for every change of a key, under each URI `uris_of` gives for it
/// (none for a key nobody subscribed to), until the feed ends or `notify` fails (the
/// client is gone). Returns the feed's error, if that ended it.
pub async fn forward<N, F>(
    mut feed: WatchStream,
    uris_of: impl Fn(&str) -> Vec<String>,
    mut notify: N,
) -> Option<ClientError>
where
    N: FnMut(String) -> F,
    F: Future<Output = bool>,
{
    while let Some(event) = feed.next().await {
        let WatchEvent { key, .. } = match event {
            Ok(event) => event,
            Err(err) => return Some(err),
        };
        for uri in uris_of(&key) {
            if !notify(uri).await {
                return None;
            }
        }
    }
    None
}

/// Decodes `%XX` escapes; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_keys_with_slashes_and_escapes() {
        assert_eq!(key_of("cairn://key/project/db").unwrap(), "project/db");
        assert_eq!(key_of("cairn://key/project%2Fdb").unwrap(), "project/db");
        assert_eq!(key_of("cairn://key/caf%C3%A9%20x").unwrap(), "café x");
        for bad in [
            "cairn://key/",
            "cairn://other/k",
            "file:///k",
            "cairn://key/%zz",
            "cairn://key/%C3",
            "cairn://key/%4",
        ] {
            assert!(key_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_change_is_notified_under_every_uri_subscribed_to_its_key() {
        let mut subscriptions = Subscriptions::default();
        subscriptions.add("cairn://key/a%2Fb%20c").unwrap();
        subscriptions.add("cairn://key/a/b%20c").unwrap();
        subscriptions.add("cairn://key/other").unwrap();
        assert!(subscriptions.add("cairn://key/%zz").is_err());
        assert_eq!(
            subscriptions.uris("a/b c"),
            ["cairn://key/a%2Fb%20c", "cairn://key/a/b%20c"]
        );
        assert!(subscriptions.uris("a/b").is_empty());

        // Unsubscribing one spelling ends the key's subscriptions, not the others'.
        subscriptions.remove("cairn://key/a/b c").unwrap();
        assert!(subscriptions.uris("a/b c").is_empty());
        assert_eq!(subscriptions.uris("other"), ["cairn://key/other"]);
        subscriptions.remove("cairn://key/other").unwrap();
        assert!(subscriptions.is_empty());

        let listened = ["cairn://key/x%2Fy".to_owned(), "file:///x".to_owned()];
        let subscriptions = Subscriptions::of_uris(&listened);
        assert_eq!(subscriptions.uris("x/y"), ["cairn://key/x%2Fy"]);
    }
}
