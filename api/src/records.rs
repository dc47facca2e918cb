//! What a key holds and has been through, as reads return it: the record, its tombstone,
//! revocation, stale flags, metadata and history events, and where a read was served.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Consistency, State};

/// The durable record of a forget. Kept forever; readable by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Tombstone {
    pub id: String,
    pub key: String,
    pub actor: String,
    pub reason: String,
    /// sha256 of the canonical JSON of the forgotten value; `null` for a pre-emptive forget.
    pub value_hash: Option<String>,
    pub forgotten_at: u64,
    pub version: u64,
    pub generation: u64,
    pub revision: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Revocation {
    pub actor: String,
    pub reason: String,
    pub revoked_at: u64,
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct StaleFlag {
    pub anchor: String,
    pub observed_hash: String,
    pub actor: String,
    pub flagged_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Meta {
    pub actor: String,
    pub source: Option<String>,
    pub anchors: Vec<String>,
    pub tags: Vec<String>,
    /// Leader-stamped unix milliseconds.
    pub updated_at: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Written,
    Forgotten,
    TombstoneCleared,
    Revoked,
    Reinstated,
    StaleFlagged,
    Superseded,
}

/// One entry of a key's append-only history. Never holds a value, only its hash.
///
/// `reason` is the reason the request gave, verbatim (`null` when it gave none). The
/// extension fields say what the operation acted on and are present only for their kind:
/// `by` for `superseded`, `anchor` and `observed_hash` for `stale_flagged`; JSON omits them
/// when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct HistoryEvent {
    pub kind: EventKind,
    pub version: u64,
    pub revision: u64,
    pub actor: String,
    pub reason: Option<String>,
    pub at: u64,
    pub value_hash: Option<String>,
    /// `superseded`: the key that replaced this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// `stale_flagged`: the anchor that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
    /// `stale_flagged`: the hash observed for the anchor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_hash: Option<String>,
}

/// Where and how a read was served (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Served {
    pub node_id: u64,
    pub role: String,
    pub consistency: Consistency,
    pub applied_index: u64,
    pub leader_commit_index: u64,
    /// Age of the node's newest quorum-confirmed read token; `null` on a node that never
    /// held one (as in `/cluster/status`).
    pub ms_since_leader_contact: Option<u64>,
}

/// A key's current record as returned by reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Record {
    pub key: String,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    pub create_revision: u64,
    /// Left out only when the record holds no value (forgotten, absent); a stored JSON
    /// `null` is present as `null`.
    // `present_value` reads a present `null` back as `Some(Value::Null)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_value"
    )]
    pub value: Option<Value>,
    pub meta: Meta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Tombstone>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation: Option<Revocation>,
    #[serde(default)]
    pub stale: Vec<StaleFlag>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    pub rendered: String,
}

/// A `value` field that is present is `Some`, JSON `null` included: serde's own `Option`
/// reads `null` as `None`, which would lose a stored `null` (the field is left out only
/// when there is no value). Used with `#[serde(default)]`, so an absent field is `None`.
pub(crate) fn present_value<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::{RecallNote, Record};

    fn record(value: Option<Value>) -> Value {
        let mut record = json!({
            "key": "k", "state": "active", "version": 1, "generation": 1,
            "forget_epoch": 0, "revision": 3, "create_revision": 3,
            "meta": {"actor": "a", "source": null, "anchors": [], "tags": [], "updated_at": 1},
            "rendered": "[k] null",
        });
        if let Some(value) = value {
            record["value"] = value;
        }
        record
    }

    #[test]
    fn a_stored_null_value_reads_back_as_present() {
        let decoded: Record = serde_json::from_value(record(Some(Value::Null))).unwrap();
        assert_eq!(decoded.value, Some(Value::Null));
        let encoded = serde_json::to_value(&decoded).unwrap();
        assert_eq!(encoded["value"], Value::Null);
        assert!(encoded.as_object().unwrap().contains_key("value"));
    }

    #[test]
    fn a_record_without_a_value_stays_without_one() {
        let decoded: Record = serde_json::from_value(record(None)).unwrap();
        assert_eq!(decoded.value, None);
        let encoded = serde_json::to_value(&decoded).unwrap();
        assert!(!encoded.as_object().unwrap().contains_key("value"));
        let decoded: Record = serde_json::from_value(record(Some(json!({"x": 1})))).unwrap();
        assert_eq!(decoded.value, Some(json!({"x": 1})));
    }

    #[test]
    fn a_recall_note_keeps_a_null_value() {
        let note = json!({
            "key": "k", "state": "active", "rendered": "[k] null", "matched": ["topic:t"],
            "version": 1, "generation": 1, "forget_epoch": 0, "revision": 3, "value": null,
        });
        let decoded: RecallNote = serde_json::from_value(note.clone()).unwrap();
        assert_eq!(decoded.value, Some(Value::Null));
        assert_eq!(serde_json::to_value(&decoded).unwrap(), note);
    }
}
