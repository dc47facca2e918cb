//! Running one logged [`Command`] against the applied state.
//!
//! The store applies a Raft entry's commands in order. For each it calls [`execute`] with a
//! [`SlotSource`] that must already reflect the effects of the *earlier commands of the same
//! entry* (slots and dedup records), e.g. an overlay of their not-yet-committed effects over
//! RocksDB; then it adds this command's effects to that overlay, and commits the whole
//! entry's effects in one atomic batch. `execute` only ever reads through `src`.
//!
//! Exactly-once retries: a command with a `request_id` remembered within the retention
//! window is answered from the record (same payload: the original decision, `replayed`) or
//! rejected (different payload: 422 `request_id_reused`), and applies nothing. The first
//! decision is remembered whichever it was: a rejection too, because the rejected attempt
//! may not be the last one to reach the log. A client that timed out on attempt 1, retried
//! and got a definite 409 must be able to trust that 409; if attempt 1, delayed in a relay,
//! were later evaluated afresh, it could apply against state that changed in between (the
//! chaos suite saw exactly this: a batch answered `key_forgotten` applied 3 s later, after
//! the key was re-created). A new attempt at a rejected request needs a new `request_id`.

use std::collections::BTreeMap;

use serde_json::json;

use crate::records::{ErrorCode, MutationResult, WatchEvent};
use crate::types::{
    Change, Command, CommandResponse, Ctx, Decision, DedupRecord, Effect, Mutation, Op, OpError,
    Slot, SlotSource,
};
use crate::write::Write;
use crate::{conditions, flag_stale, forget, reinstate, revoke, supersede, write};

/// Decides at apply time whether a command's author may still do an operation (SPEC §8).
///
/// The node checks grants before proposing; this is the second check, against the grants
/// at the entry's own log position, so that a grant revoked (or a principal deleted) while
/// its command was in flight refuses that command identically on every replica.
pub trait Permit {
    fn check(&self, op: &Op) -> Result<(), OpError>;

    /// Whether request ids are per principal at this entry (auth on): a principal's
    /// `request_id` is then remembered under its name, so another principal's request
    /// with the same id neither replays it, nor is refused as `request_id_reused`, nor
    /// learns that the id was used. Without auth, ids are one namespace.
    fn request_ids_per_principal(&self) -> bool {
        false
    }
}

/// The permit of a cluster without auth: every operation is allowed.
pub struct AllowAll;

impl Permit for AllowAll {
    fn check(&self, _: &Op) -> Result<(), OpError> {
        Ok(())
    }
}

/// Executes `cmd` at `ctx` against `src`; `retention_ms` is the dedup retention window.
///
/// - Permission first: if `permit` refuses any mutation, the command is `Rejected` with
///   that refusal (and `op_index` for a batch) before any rule runs.
/// - All or nothing: on the first rejected mutation the response is `Rejected` (with
///   `op_index` for a batch) and no key changes; the only effect is the dedup record of
///   the rejection if the command has a `request_id`.
/// - A replay or a reused `request_id` has no effects at all.
/// - Otherwise the effects hold, per touched key, its final slot once, one event (and one
///   watch record) per applied mutation in order, each new tombstone, the net anchor-index
///   changes, and the dedup record if the command has a `request_id`.
/// - Deterministic: depends only on `cmd`, what `src` returns, `ctx` and `retention_ms`.
pub fn execute<S: SlotSource>(
    cmd: &Command,
    src: &S,
    permit: &dyn Permit,
    ctx: &Ctx,
    retention_ms: u64,
) -> Result<(CommandResponse, Vec<Effect>), S::Error> {
    let dedup_key = cmd
        .request_id
        .as_deref()
        .map(|id| DedupKey::of(cmd, id, permit.request_ids_per_principal()));
    if let Some(key) = &dedup_key {
        if let Some(record) = remembered(src, key, cmd, ctx.now_ms, retention_ms)? {
            return Ok((replay(cmd, key.id, record), Vec::new()));
        }
    }
    let outcome = match permitted(&cmd.mutations, permit) {
        Some(denied) => Err(denied),
        None => apply_all(&cmd.mutations, src, ctx)?,
    };
    let (response, mut effects) = match outcome {
        Ok(changes) => {
            let (results, effects) = results_and_effects(changes);
            let response = CommandResponse::Applied {
                results,
                revision: ctx.revision,
                replayed: false,
            };
            (response, effects)
        }
        Err((i, error)) => {
            let op_index = cmd.is_batch.then_some(i);
            (CommandResponse::Rejected { error, op_index }, Vec::new())
        }
    };
    if let Some(key) = dedup_key {
        effects.push(Effect::PutDedup {
            request_id: key.stored,
            record: remember(cmd, &response, ctx),
        });
    }
    Ok((response, effects))
}

/// Where a command's `request_id` is remembered.
struct DedupKey<'c> {
    /// The id as the client sent it (what answers name).
    id: &'c str,
    /// The store's key: the id itself, or with request ids per principal, the author's
    /// name, a NUL and the id. Admitted ids hold no control character, so a per-principal
    /// key never equals a bare one.
    stored: String,
    /// With request ids per principal, the bare id too: a record made before they were
    /// (auth turned on later, or an older build) still answers its retries.
    bare_too: bool,
}

impl<'c> DedupKey<'c> {
    fn of(cmd: &Command, id: &'c str, per_principal: bool) -> DedupKey<'c> {
        // With auth on, every op's actor is its author (the principal) once admitted.
        let author = cmd.mutations.first().map(|m| m.op.actor());
        match author.filter(|_| per_principal) {
            Some(author) => DedupKey {
                id,
                stored: format!("{author}\0{id}"),
                bare_too: true,
            },
            None => DedupKey {
                id,
                stored: id.to_string(),
                bare_too: false,
            },
        }
    }
}

/// The live dedup record answering `cmd` under `key`, if any: its own, else (`bare_too`)
/// one kept under the bare id for this very request.
///
/// - A record under the bare id was made before ids were per principal (auth turned on
///   later). It answers only the retries of its own request (same payload): another
///   request under that id, from whichever principal, is a request of its own, since with
///   auth on an id is its principal's and no one else's use of it refuses or shows
///   anything (SPEC §2).
fn remembered<S: SlotSource>(
    src: &S,
    key: &DedupKey<'_>,
    cmd: &Command,
    now_ms: u64,
    retention_ms: u64,
) -> Result<Option<DedupRecord>, S::Error> {
    let live = |record: &DedupRecord| dedup_live(record, now_ms, retention_ms);
    if let Some(record) = src.dedup(&key.stored)?.filter(live) {
        return Ok(Some(record));
    }
    if !key.bare_too {
        return Ok(None);
    }
    let own_request = |record: &DedupRecord| record.payload_hash == cmd.payload_hash;
    Ok(src.dedup(key.id)?.filter(live).filter(own_request))
}

/// The dedup record of the first decision on `cmd`.
fn remember(cmd: &Command, response: &CommandResponse, ctx: &Ctx) -> DedupRecord {
    let decision = match response {
        CommandResponse::Applied { results, .. } => Decision::Applied(results.clone()),
        CommandResponse::Rejected { error, op_index } => Decision::Rejected {
            error: error.clone(),
            op_index: *op_index,
        },
    };
    DedupRecord {
        payload_hash: cmd.payload_hash.clone(),
        decision,
        revision: ctx.revision,
        decided_at_ms: ctx.now_ms,
    }
}

/// Whether a dedup record still answers retries at leader time `now_ms` (the store may
/// drop records for which this is false; they would be ignored anyway).
pub fn dedup_live(record: &DedupRecord, now_ms: u64, retention_ms: u64) -> bool {
    record.decided_at_ms.saturating_add(retention_ms) >= now_ms
}

/// The answer to a retry of a remembered `request_id`.
fn replay(cmd: &Command, id: &str, record: DedupRecord) -> CommandResponse {
    if record.payload_hash != cmd.payload_hash {
        let error = OpError::new(
            ErrorCode::RequestIdReused,
            format!("request_id {id:?} was already used for a different request"),
            json!({ "request_id": id }),
        );
        return CommandResponse::Rejected {
            error,
            op_index: None,
        };
    }
    match record.decision {
        Decision::Applied(results) => CommandResponse::Applied {
            results: results
                .into_iter()
                .map(|r| MutationResult {
                    replayed: true,
                    ..r
                })
                .collect(),
            revision: record.revision,
            replayed: true,
        },
        Decision::Rejected { error, op_index } => CommandResponse::Rejected {
            error: error.replayed(),
            op_index,
        },
    }
}

/// The changes of every mutation of a command, or the index and error of the first
/// rejected one.
type Outcome = Result<Vec<Change>, (usize, OpError)>;

/// The first mutation `permit` refuses, with its index.
fn permitted(mutations: &[Mutation], permit: &dyn Permit) -> Option<(usize, OpError)> {
    mutations
        .iter()
        .enumerate()
        .find_map(|(i, m)| permit.check(&m.op).err().map(|e| (i, e)))
}

/// Applies `mutations` in order, each seeing the slots the earlier ones produced.
///
/// An earlier mutation's slot is read in place from `changes` (`latest` maps a key to the
/// last change of it), not copied: every copy of a slot copies its value.
fn apply_all<S: SlotSource>(
    mutations: &[Mutation],
    src: &S,
    ctx: &Ctx,
) -> Result<Outcome, S::Error> {
    let mut latest: BTreeMap<&str, usize> = BTreeMap::new();
    let mut changes: Vec<Change> = Vec::with_capacity(mutations.len());
    for (i, m) in mutations.iter().enumerate() {
        let key = m.op.key();
        let stored;
        let current = match latest.get(key) {
            Some(&at) => Some(&changes[at].slot),
            None => {
                stored = src.slot(key)?;
                stored.as_ref()
            }
        };
        match apply(current, m, ctx) {
            Ok(change) => {
                latest.insert(key, changes.len());
                changes.push(change);
            }
            Err(e) => {
                let stored = src.slot(key)?;
                let e = match refusing_earlier_op(&changes, stored.as_ref(), m, e.code) {
                    Some(earlier) => after_earlier_op(e, earlier),
                    None => e,
                };
                return Ok(Err((i, e)));
            }
        }
    }
    Ok(Ok(changes))
}

/// The earlier op of the batch whose change of the refused op's key made the state that
/// refused it with `code`, looked for only on this rare path (`changes[j]` is op j's;
/// `stored` is the key's slot before the batch; an idempotent repeat has no event and
/// changed nothing):
/// - for `stale_write`, the last op that set the fence (forgot, revoked or re-created the
///   key);
/// - for a stale flag past the key's limit, the last op that added a flag (one that
///   replaced a flag on the same anchor, or changed the key otherwise, did not fill it);
/// - for any other refusal, the last op that changed the key.
///
/// `None` when the batch's ops did not make that state: the stored key did, and the error
/// describes it.
fn refusing_earlier_op(
    changes: &[Change],
    stored: Option<&Slot>,
    refused: &Mutation,
    code: ErrorCode,
) -> Option<usize> {
    let key = refused.op.key();
    let mut of_key = changes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.slot.key == key && c.event.is_some());
    match (code, &refused.op) {
        (ErrorCode::StaleWrite, _) => of_key
            .rfind(|(_, c)| c.event.as_ref().is_some_and(|e| e.kind.fences()))
            .map(|(j, _)| j),
        (ErrorCode::TooLarge, Op::FlagStale { .. }) => {
            let mut flags_before = stored.map_or(0, |s| s.stale.len());
            let mut last_added = None;
            for (j, c) in of_key {
                if c.slot.stale.len() > flags_before {
                    last_added = Some(j);
                }
                flags_before = c.slot.stale.len();
            }
            last_added
        }
        _ => of_key.next_back().map(|(j, _)| j),
    }
}

/// The details of a rejection that describe the key's state (SPEC §2, "error details").
const STATE_DETAILS: [&str; 5] = [
    "current_version",
    "fence_revision",
    "tombstone",
    "revocation",
    "rendered",
];

/// A batch op refused on the state an earlier op (`earlier`) of the same batch would have
/// made. The batch applies nothing, so that state never exists: the rejection names the
/// op instead of describing the state (no tombstone id that no lookup would find, no
/// version or fence revision at which nothing happened to the key).
fn after_earlier_op(e: OpError, earlier: usize) -> OpError {
    let mut based_on = None;
    let e = e.with_details(|details| {
        based_on = details.get("based_on_revision").cloned();
        for name in STATE_DETAILS {
            details.remove(name);
        }
        details.insert("after_op_index".into(), earlier.into());
    });
    let message = match (e.code, based_on) {
        // The stored message names the fence's revision: this batch's own, never stored.
        (ErrorCode::StaleWrite, Some(based)) => format!(
            "op {earlier} of this batch would forget, revoke or re-create the key, after \
             based_on_revision {based}; nothing was applied"
        ),
        _ => format!(
            "{} (the state op {earlier} of this batch would have left; nothing was applied)",
            e.message
        ),
    };
    OpError { message, ..e }
}

/// Applies one mutation to the current `slot` of its key: conditions first, then the
/// operation's rule (SPEC §2).
pub fn apply(slot: Option<&Slot>, m: &Mutation, ctx: &Ctx) -> Result<Change, OpError> {
    conditions::check(slot, &m.cond)?;
    match &m.op {
        Op::Write {
            key,
            value,
            value_hash,
            actor,
            source,
            anchors,
            tags,
            clear_tombstone,
            override_revocation,
            reason,
        } => {
            let w = Write {
                value,
                value_hash,
                actor,
                source: source.as_deref(),
                anchors,
                tags,
                clear_tombstone: *clear_tombstone,
                override_revocation: *override_revocation,
                reason: reason.as_deref(),
            };
            write::apply(slot, key, &w, ctx)
        }
        Op::Forget { key, actor, reason } => forget::apply(slot, key, actor, reason, ctx),
        Op::Revoke { key, actor, reason } => revoke::apply(slot, key, actor, reason, ctx),
        Op::Reinstate { key, actor, reason } => {
            reinstate::apply(slot, key, actor, reason.as_deref(), ctx)
        }
        Op::FlagStale {
            key,
            actor,
            anchor,
            observed_hash,
        } => flag_stale::apply(slot, key, actor, anchor, observed_hash, ctx),
        Op::Supersede {
            key,
            by,
            actor,
            reason,
        } => supersede::apply(slot, key, by, actor, reason.as_deref(), ctx),
    }
}

/// The results of a successful command's `changes` and its store writes (see
/// [`execute`]). Takes the changes whole so that each result and each key's final slot
/// move out of them rather than being copied.
fn results_and_effects(changes: Vec<Change>) -> (Vec<MutationResult>, Vec<Effect>) {
    let mut out = Vec::new();
    // Each key's last change, whose slot is the key's final one (in key order).
    let mut final_change: BTreeMap<&str, usize> = BTreeMap::new();
    // Net count per (anchor, key): each change removes only indexed anchors and adds only
    // unindexed ones, so the running sum stays in -1..=1 and its sign is the net effect.
    let mut anchor_net: BTreeMap<(&str, &str), i32> = BTreeMap::new();
    for (at, change) in changes.iter().enumerate() {
        let Some(event) = &change.event else {
            continue; // an idempotent no-op writes nothing
        };
        let slot = &change.slot;
        out.push(Effect::AppendEvent {
            key: slot.key.clone(),
            event: event.clone(),
        });
        if let Some(t) = &change.new_tombstone {
            out.push(Effect::PutTombstone(t.clone()));
        }
        out.push(Effect::Watch(WatchEvent {
            revision: slot.revision,
            key: slot.key.clone(),
            kind: event.kind,
            state: slot.state,
            version: slot.version,
            generation: slot.generation,
            forget_epoch: slot.forget_epoch,
        }));
        final_change.insert(&slot.key, at);
        for a in &change.anchors_removed {
            *anchor_net.entry((a, &slot.key)).or_default() -= 1;
        }
        for a in &change.anchors_added {
            *anchor_net.entry((a, &slot.key)).or_default() += 1;
        }
    }
    let anchor_effects: Vec<Effect> = anchor_net
        .into_iter()
        .filter_map(|((anchor, key), net)| {
            let (anchor, key) = (anchor.to_string(), key.to_string());
            match net.signum() {
                -1 => Some(Effect::AnchorRemove { anchor, key }),
                1 => Some(Effect::AnchorAdd { anchor, key }),
                _ => None,
            }
        })
        .collect();
    let final_order: Vec<usize> = final_change.into_values().collect();
    let (results, mut slots): (Vec<MutationResult>, Vec<Option<Slot>>) = changes
        .into_iter()
        .map(|c| (c.result, Some(c.slot)))
        .unzip();
    out.extend(
        final_order
            .into_iter()
            .filter_map(|at| slots[at].take().map(Effect::PutSlot)),
    );
    out.extend(anchor_effects);
    (results, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{EventKind, State};
    use crate::types::Conditions;
    use std::convert::Infallible;

    /// Applied state in maps; effects are applied the way the store applies them.
    #[derive(Default)]
    struct Map {
        slots: BTreeMap<String, Slot>,
        dedup: BTreeMap<String, DedupRecord>,
    }

    impl SlotSource for Map {
        type Error = Infallible;
        fn slot(&self, key: &str) -> Result<Option<Slot>, Infallible> {
            Ok(self.slots.get(key).cloned())
        }
        fn dedup(&self, id: &str) -> Result<Option<DedupRecord>, Infallible> {
            Ok(self.dedup.get(id).cloned())
        }
    }

    impl Map {
        fn run(&mut self, cmd: &Command, revision: u64) -> (CommandResponse, Vec<Effect>) {
            self.run_with(cmd, revision, &AllowAll)
        }

        fn run_with(
            &mut self,
            cmd: &Command,
            revision: u64,
            permit: &dyn Permit,
        ) -> (CommandResponse, Vec<Effect>) {
            let ctx = Ctx {
                revision,
                now_ms: revision * 1000,
            };
            let (resp, effects) = execute(cmd, self, permit, &ctx, RETENTION).unwrap();
            for e in &effects {
                match e {
                    Effect::PutSlot(s) => {
                        self.slots.insert(s.key.clone(), s.clone());
                    }
                    Effect::PutDedup { request_id, record } => {
                        self.dedup.insert(request_id.clone(), record.clone());
                    }
                    _ => {}
                }
            }
            (resp, effects)
        }
    }

    const RETENTION: u64 = 10_000;

    fn m(op: Op) -> Mutation {
        Mutation {
            op,
            cond: Conditions::default(),
        }
    }

    fn write_m(key: &str, value: &str, anchors: &[&str]) -> Mutation {
        write_flags(key, value, anchors, false, false)
    }

    fn write_flags(
        key: &str,
        value: &str,
        anchors: &[&str],
        clear_tombstone: bool,
        override_revocation: bool,
    ) -> Mutation {
        m(Op::Write {
            key: key.into(),
            value: value.into(),
            value_hash: crate::hash::value_hash(value),
            actor: "a".into(),
            source: None,
            anchors: anchors.iter().map(|a| a.to_string()).collect(),
            tags: vec![],
            clear_tombstone,
            override_revocation,
            reason: None,
        })
    }

    fn forget_m(key: &str) -> Mutation {
        m(Op::Forget {
            key: key.into(),
            actor: "a".into(),
            reason: "r".into(),
        })
    }

    fn revoke_m(key: &str) -> Mutation {
        m(Op::Revoke {
            key: key.into(),
            actor: "a".into(),
            reason: "r".into(),
        })
    }

    fn cmd(mutations: Vec<Mutation>, request_id: Option<&str>) -> Command {
        let is_batch = mutations.len() > 1;
        let payload_hash = serde_json::to_string(&mutations).unwrap();
        Command {
            request_id: request_id.map(str::to_string),
            payload_hash,
            mutations,
            is_batch,
        }
    }

    fn applied(resp: &CommandResponse) -> &[MutationResult] {
        match resp {
            CommandResponse::Applied { results, .. } => results,
            CommandResponse::Rejected { error, .. } => panic!("rejected: {error:?}"),
        }
    }

    fn rejected(resp: &CommandResponse) -> (ErrorCode, Option<usize>) {
        match resp {
            CommandResponse::Rejected { error, op_index } => (error.code, *op_index),
            CommandResponse::Applied { .. } => panic!("applied: {resp:?}"),
        }
    }

    #[test]
    fn a_write_yields_slot_event_watch_and_anchor() {
        let mut map = Map::default();
        let (resp, effects) = map.run(&cmd(vec![write_m("k", "1", &["tag:x"])], None), 5);
        assert!(matches!(
            resp,
            CommandResponse::Applied {
                revision: 5,
                replayed: false,
                ..
            }
        ));
        let slot = map.slots["k"].clone();
        let event = slot_event(&effects);
        assert_eq!(
            (event.kind, event.version, event.revision),
            (EventKind::Written, 1, 5)
        );
        assert_eq!(
            effects[1..],
            [
                Effect::Watch(WatchEvent {
                    revision: 5,
                    key: "k".into(),
                    kind: EventKind::Written,
                    state: State::Active,
                    version: 1,
                    generation: 1,
                    forget_epoch: 0,
                }),
                Effect::PutSlot(slot),
                Effect::AnchorAdd {
                    anchor: "tag:x".into(),
                    key: "k".into()
                },
            ]
        );
    }

    fn slot_event(effects: &[Effect]) -> crate::records::HistoryEvent {
        match &effects[0] {
            Effect::AppendEvent { event, .. } => event.clone(),
            other => panic!("first effect is {other:?}"),
        }
    }

    #[test]
    fn later_ops_see_earlier_ops_and_each_key_is_put_once() {
        let mut map = Map::default();
        let reinstate = m(Op::Reinstate {
            key: "k".into(),
            actor: "a".into(),
            reason: None,
        });
        let batch = cmd(
            vec![
                write_m("k", "1", &[]),
                revoke_m("k"),
                reinstate,
                write_m("j", "2", &[]),
            ],
            None,
        );
        let (resp, effects) = map.run(&batch, 7);
        let versions: Vec<(&str, u64)> = applied(&resp)
            .iter()
            .map(|r| (r.key.as_str(), r.version))
            .collect();
        assert_eq!(versions, vec![("k", 1), ("k", 2), ("k", 3), ("j", 1)]);
        let puts: Vec<&Slot> = effects
            .iter()
            .filter_map(|e| {
                if let Effect::PutSlot(s) = e {
                    Some(s)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(puts.len(), 2);
        assert_eq!(
            (map.slots["k"].version, map.slots["k"].state),
            (3, State::Active)
        );
        let events = effects
            .iter()
            .filter(|e| matches!(e, Effect::AppendEvent { .. }))
            .count();
        let watches = effects
            .iter()
            .filter(|e| matches!(e, Effect::Watch(_)))
            .count();
        assert_eq!((events, watches), (4, 4));
    }

    #[test]
    fn a_rejected_batch_applies_nothing_and_names_the_op() {
        let mut map = Map::default();
        let (resp, effects) = map.run(
            &cmd(
                vec![write_m("k", "1", &["tag:x"]), revoke_m("absent")],
                Some("b"),
            ),
            3,
        );
        assert_eq!(rejected(&resp), (ErrorCode::NotFound, Some(1)));
        assert!(map.slots.is_empty(), "no key changed");
        let [Effect::PutDedup { record, .. }] = effects.as_slice() else {
            panic!("only the rejection is remembered: {effects:?}");
        };
        assert!(matches!(
            record.decision,
            Decision::Rejected {
                op_index: Some(1),
                ..
            }
        ));
    }

    /// Regression (chaos run, seed 16646613149793820745): a batch answered `key_forgotten`
    /// was applied 3 s later by an earlier attempt of the same request that reached the log
    /// after the key had been re-created. The first decision, a rejection, must stand.
    #[test]
    fn a_rejected_request_id_stays_rejected_after_the_state_changes() {
        let mut map = Map::default();
        map.run(&cmd(vec![forget_m("k")], Some("f")), 1);
        let late = cmd(vec![write_m("k", "stale", &[])], Some("w"));
        let (first, _) = map.run(&late, 2);
        assert_eq!(rejected(&first), (ErrorCode::KeyForgotten, None));
        let reopen = cmd(vec![write_flags("k", "new", &[], true, false)], Some("c"));
        map.run(&reopen, 3);
        let version = map.slots["k"].version;

        let (again, effects) = map.run(&late, 4);
        assert_eq!(rejected(&again), (ErrorCode::KeyForgotten, None));
        assert!(effects.is_empty(), "a replay applies nothing: {effects:?}");
        assert_eq!(
            map.slots["k"].version, version,
            "the stale write did not land"
        );
        let CommandResponse::Rejected { error, .. } = again else {
            panic!()
        };
        let CommandResponse::Rejected {
            error: original, ..
        } = first
        else {
            panic!()
        };
        assert_eq!(error.message, original.message, "the original answer");
        assert!(
            error.details_json.contains(r#""replayed":true"#),
            "{error:?}"
        );
    }

    /// The details of a batch op refused on what an earlier op of the batch would have
    /// done: no tombstone, version or fence that was never stored, but the earlier op.
    #[test]
    fn a_batch_op_refused_on_an_earlier_ops_state_names_that_op_not_the_state() {
        let details = |resp: &CommandResponse| match resp {
            CommandResponse::Rejected { error, .. } => {
                serde_json::from_str::<serde_json::Value>(&error.details_json).unwrap()
            }
            CommandResponse::Applied { .. } => panic!("applied: {resp:?}"),
        };
        let mut map = Map::default();
        map.run(&cmd(vec![write_m("k", "v", &[])], None), 1);
        let forget_then_revoke = cmd(vec![forget_m("k"), revoke_m("k")], None);
        let (resp, effects) = map.run(&forget_then_revoke, 2);
        assert_eq!(rejected(&resp), (ErrorCode::KeyForgotten, Some(1)));
        assert_eq!(details(&resp), serde_json::json!({ "after_op_index": 0 }));
        assert!(effects.is_empty(), "{effects:?}");
        assert_eq!(map.slots["k"].state, State::Active, "nothing applied");

        let mut fenced = write_m("k", "w", &[]);
        fenced.cond.based_on_revision = Some(1);
        let (resp, _) = map.run(&cmd(vec![revoke_m("k"), fenced], None), 3);
        assert_eq!(rejected(&resp), (ErrorCode::StaleWrite, Some(1)));
        assert_eq!(
            details(&resp),
            serde_json::json!({ "after_op_index": 0, "based_on_revision": 1 })
        );

        // The op that made the refusing state, not the first op of the key: write, an
        // other key, revoke, then a write refused as revoked names op 2.
        let (resp, _) = map.run(
            &cmd(
                vec![
                    write_m("k", "x", &[]),
                    write_m("j", "y", &[]),
                    revoke_m("k"),
                    write_m("k", "z", &[]),
                ],
                None,
            ),
            4,
        );
        assert_eq!(rejected(&resp), (ErrorCode::KeyRevoked, Some(3)));
        assert_eq!(details(&resp), serde_json::json!({ "after_op_index": 2 }));
        let CommandResponse::Rejected { error, .. } = &resp else {
            panic!()
        };
        assert!(
            error.message.contains("op 2 of this batch"),
            "{}",
            error.message
        );
        let mut fenced = write_m("k", "w", &[]);
        fenced.cond.based_on_revision = Some(1);
        let (resp, _) = map.run(
            &cmd(vec![write_m("k", "x", &[]), revoke_m("k"), fenced], None),
            4,
        );
        let CommandResponse::Rejected { error, .. } = &resp else {
            panic!()
        };
        assert_eq!(
            error.message,
            "op 1 of this batch would forget, revoke or re-create the key, after \
             based_on_revision 1; nothing was applied"
        );

        // An idempotent repeat changes nothing: the state met is the stored one, in full.
        map.run(&cmd(vec![forget_m("k")], None), 5);
        let (resp, _) = map.run(&cmd(vec![forget_m("k"), revoke_m("k")], None), 6);
        assert_eq!(rejected(&resp), (ErrorCode::KeyForgotten, Some(1)));
        let stored = details(&resp);
        assert_eq!(stored["tombstone"]["revision"], 5, "{stored}");
        assert!(stored.get("after_op_index").is_none(), "{stored}");
    }

    /// A batch's `stale_write` names the op that set the fence, not an op that only
    /// changed the key after it; with no such op the fence is the stored one, described.
    #[test]
    fn a_batch_stale_write_names_the_op_that_fenced_or_the_stored_fence() {
        let flag_m = |key: &str| {
            m(Op::FlagStale {
                key: key.into(),
                actor: "a".into(),
                anchor: "tag:a".into(),
                observed_hash: "h".into(),
            })
        };
        let based_on_1 = || {
            let mut fenced = write_flags("k", "w", &[], false, true);
            fenced.cond.based_on_revision = Some(1);
            fenced
        };
        let mut map = Map::default();
        map.run(&cmd(vec![write_m("k", "v", &[])], None), 1);
        let (resp, _) = map.run(
            &cmd(vec![revoke_m("k"), flag_m("k"), based_on_1()], None),
            2,
        );
        assert_eq!(rejected(&resp), (ErrorCode::StaleWrite, Some(2)));
        let CommandResponse::Rejected { error, .. } = &resp else {
            panic!()
        };
        let details: serde_json::Value = serde_json::from_str(&error.details_json).unwrap();
        assert_eq!(
            details,
            serde_json::json!({ "after_op_index": 0, "based_on_revision": 1 })
        );
        assert!(
            error.message.starts_with("op 0 of this batch"),
            "{}",
            error.message
        );

        map.run(&cmd(vec![revoke_m("k")], None), 3);
        let (resp, _) = map.run(&cmd(vec![flag_m("k"), based_on_1()], None), 4);
        let CommandResponse::Rejected { error, .. } = &resp else {
            panic!("{resp:?}")
        };
        let details: serde_json::Value = serde_json::from_str(&error.details_json).unwrap();
        assert_eq!(
            details,
            serde_json::json!({ "based_on_revision": 1, "fence_revision": 3 })
        );
        assert!(error.message.contains("at revision 3"), "{}", error.message);
    }

    /// A stale flag past the key's limit names the last op that added a flag, not a
    /// later one that only replaced a flag on its anchor; with every flag stored, none.
    #[test]
    fn a_batch_flag_past_the_limit_names_the_op_that_added_the_last_flag() {
        use crate::flag_stale::STALE_FLAGS_MAX;
        let flag_m = |anchor: String| {
            m(Op::FlagStale {
                key: "k".into(),
                actor: "a".into(),
                anchor,
                observed_hash: "h".into(),
            })
        };
        let anchor = |i: usize| format!("tag:a{i}");
        let mut map = Map::default();
        map.run(&cmd(vec![write_m("k", "v", &[])], None), 1);
        let stored_flags = (0..STALE_FLAGS_MAX - 1)
            .map(|i| flag_m(anchor(i)))
            .collect();
        map.run(&cmd(stored_flags, None), 2);

        // Op 0 adds the 64th flag, op 1 replaces the flag of op 0's anchor, op 2 is one
        // too many: op 0 filled the key.
        let last = STALE_FLAGS_MAX - 1;
        let batch = vec![
            flag_m(anchor(last)),
            flag_m(anchor(last)),
            flag_m(anchor(STALE_FLAGS_MAX)),
        ];
        let (resp, _) = map.run(&cmd(batch, None), 3);
        assert_eq!(rejected(&resp), (ErrorCode::TooLarge, Some(2)));
        let CommandResponse::Rejected { error, .. } = &resp else {
            panic!("{resp:?}")
        };
        let details: serde_json::Value = serde_json::from_str(&error.details_json).unwrap();
        assert_eq!(details["after_op_index"], 0, "{details}");
        assert_eq!(details["size"], STALE_FLAGS_MAX + 1, "{details}");

        // Every flag stored: a replace, then one too many, names no op.
        map.run(&cmd(vec![flag_m(anchor(last))], None), 4);
        let batch = vec![flag_m(anchor(0)), flag_m(anchor(STALE_FLAGS_MAX))];
        let (resp, _) = map.run(&cmd(batch, None), 5);
        assert_eq!(rejected(&resp), (ErrorCode::TooLarge, Some(1)));
        let CommandResponse::Rejected { error, .. } = &resp else {
            panic!("{resp:?}")
        };
        let details: serde_json::Value = serde_json::from_str(&error.details_json).unwrap();
        assert!(details.get("after_op_index").is_none(), "{details}");
        assert_eq!(
            map.slots["k"].stale.len(),
            STALE_FLAGS_MAX,
            "nothing applied"
        );
    }

    #[test]
    fn a_rejected_single_op_has_no_op_index() {
        let mut map = Map::default();
        let (resp, effects) = map.run(&cmd(vec![revoke_m("absent")], None), 3);
        assert_eq!(rejected(&resp), (ErrorCode::NotFound, None));
        assert!(effects.is_empty());
    }

    #[test]
    fn conditions_are_checked_against_the_overlay() {
        let mut map = Map::default();
        let mut second = write_m("k", "2", &[]);
        second.cond.expected_version = Some(1);
        let (resp, _) = map.run(&cmd(vec![write_m("k", "1", &[]), second.clone()], None), 3);
        assert_eq!(applied(&resp)[1].version, 2);
        let (resp, effects) = map.run(&cmd(vec![write_m("k", "3", &[]), second], None), 4);
        assert_eq!(rejected(&resp), (ErrorCode::VersionConflict, Some(1)));
        assert!(effects.is_empty());
        assert_eq!(map.slots["k"].version, 2);
    }

    #[test]
    fn forget_puts_its_tombstone_and_a_second_forget_writes_nothing() {
        let mut map = Map::default();
        map.run(&cmd(vec![write_m("k", "1", &["tag:x"])], None), 1);
        let (resp, effects) = map.run(&cmd(vec![forget_m("k")], None), 2);
        let tombstone = applied(&resp)[0].tombstone.clone().unwrap();
        assert!(effects.contains(&Effect::PutTombstone(tombstone.clone())));
        assert!(effects.contains(&Effect::AnchorRemove {
            anchor: "tag:x".into(),
            key: "k".into()
        }));
        let (resp, effects) = map.run(&cmd(vec![forget_m("k")], None), 3);
        let r = &applied(&resp)[0];
        assert_eq!(
            (r.already, r.tombstone.as_ref(), r.revision),
            (Some(true), Some(&tombstone), 2)
        );
        assert!(effects.is_empty());
    }

    #[test]
    fn anchor_changes_are_net_within_a_command() {
        let mut map = Map::default();
        let (_, effects) = map.run(
            &cmd(
                vec![write_m("k", "1", &["tag:x", "tag:y"]), forget_m("k")],
                None,
            ),
            1,
        );
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::AnchorAdd { .. } | Effect::AnchorRemove { .. })));
        map.run(&cmd(vec![write_m("j", "1", &["tag:x"])], None), 2);
        let again = write_flags("j", "2", &["tag:x", "tag:z"], true, false);
        let (_, effects) = map.run(&cmd(vec![forget_m("j"), again], None), 3);
        let anchor_effects: Vec<&Effect> = effects
            .iter()
            .filter(|e| matches!(e, Effect::AnchorAdd { .. } | Effect::AnchorRemove { .. }))
            .collect();
        assert_eq!(
            anchor_effects,
            vec![&Effect::AnchorAdd {
                anchor: "tag:z".into(),
                key: "j".into()
            }]
        );
    }

    #[test]
    fn a_retry_within_retention_is_replayed_without_effects() {
        let mut map = Map::default();
        let c = cmd(vec![write_m("k", "1", &[])], Some("r1"));
        let (first, effects) = map.run(&c, 4);
        assert!(effects.iter().any(|e| matches!(e, Effect::PutDedup { .. })));
        let (again, effects) = map.run(&c, 8);
        assert!(effects.is_empty());
        let CommandResponse::Applied {
            results,
            revision,
            replayed,
        } = again
        else {
            panic!()
        };
        assert_eq!((revision, replayed), (4, true));
        let expected: Vec<_> = applied(&first)
            .iter()
            .map(|r| MutationResult {
                replayed: true,
                ..r.clone()
            })
            .collect();
        assert_eq!(results, expected);
        assert_eq!(map.slots["k"].version, 1, "nothing was applied twice");
    }

    #[test]
    fn a_reused_request_id_with_another_payload_is_rejected() {
        let mut map = Map::default();
        map.run(&cmd(vec![write_m("k", "1", &[])], Some("r1")), 4);
        let (resp, effects) = map.run(&cmd(vec![write_m("k", "2", &[])], Some("r1")), 5);
        assert_eq!(rejected(&resp), (ErrorCode::RequestIdReused, None));
        let CommandResponse::Rejected { error, .. } = resp else {
            panic!()
        };
        assert_eq!(error.details_json, r#"{"request_id":"r1"}"#);
        assert!(effects.is_empty());
    }

    #[test]
    fn an_expired_request_id_is_a_new_request() {
        let mut map = Map::default();
        let c = cmd(vec![write_m("k", "1", &[])], Some("r1"));
        map.run(&c, 4); // applied at 4000 ms, live through 14000 ms
        let (resp, _) = map.run(&c, 14);
        assert!(matches!(
            resp,
            CommandResponse::Applied { replayed: true, .. }
        ));
        let (resp, effects) = map.run(&c, 15);
        assert_eq!(applied(&resp)[0].version, 2);
        assert!(effects
            .iter()
            .any(|e| matches!(e, Effect::PutDedup { record, .. } if record.revision == 15)));
    }

    /// Allows everything, with request ids per principal (a cluster with auth on).
    struct PerPrincipal;
    impl Permit for PerPrincipal {
        fn check(&self, _: &Op) -> Result<(), OpError> {
            Ok(())
        }
        fn request_ids_per_principal(&self) -> bool {
            true
        }
    }

    fn write_by(actor: &str, key: &str, value: &str) -> Mutation {
        let mut mutation = write_m(key, value, &[]);
        if let Op::Write { actor: author, .. } = &mut mutation.op {
            *author = actor.into();
        }
        mutation
    }

    #[test]
    fn with_request_ids_per_principal_another_principals_id_is_a_new_request() {
        let mut map = Map::default();
        let alice = cmd(vec![write_by("alice", "k1", "1")], Some("r1"));
        let bob = cmd(vec![write_by("bob", "k2", "2")], Some("r1"));
        map.run_with(&alice, 4, &PerPrincipal);
        let (resp, _) = map.run_with(&bob, 5, &PerPrincipal);
        assert_eq!(applied(&resp)[0].version, 1, "bob's request is his own");
        assert_eq!(
            map.dedup.keys().collect::<Vec<_>>(),
            ["alice\0r1", "bob\0r1"]
        );
        // Each principal's retry replays its own request; another payload is still refused.
        for (retry, revision) in [(&alice, 4), (&bob, 5)] {
            let (resp, effects) = map.run_with(retry, 6, &PerPrincipal);
            assert!(
                matches!(resp, CommandResponse::Applied { replayed: true, revision: r, .. } if r == revision),
                "{resp:?}"
            );
            assert!(effects.is_empty());
        }
        let other = cmd(vec![write_by("alice", "k1", "3")], Some("r1"));
        let (resp, _) = map.run_with(&other, 7, &PerPrincipal);
        assert_eq!(rejected(&resp), (ErrorCode::RequestIdReused, None));
    }

    #[test]
    fn a_request_id_remembered_before_ids_were_per_principal_still_answers_its_retry() {
        let mut map = Map::default();
        let alice = cmd(vec![write_by("alice", "k1", "1")], Some("r1"));
        map.run(&alice, 4); // auth off: remembered under the bare id
        let (resp, effects) = map.run_with(&alice, 5, &PerPrincipal);
        assert!(
            matches!(
                resp,
                CommandResponse::Applied {
                    replayed: true,
                    revision: 4,
                    ..
                }
            ),
            "{resp:?}"
        );
        assert!(effects.is_empty());
        assert_eq!(map.slots["k1"].version, 1, "nothing was applied twice");

        // Another request under that id is a request of its own, whoever sends it.
        for (author, key) in [("alice", "k2"), ("bob", "k3")] {
            let other = cmd(vec![write_by(author, key, "2")], Some("r1"));
            let (resp, _) = map.run_with(&other, 6, &PerPrincipal);
            assert_eq!(applied(&resp)[0].version, 1, "{author}: {resp:?}");
        }
    }

    /// Refuses every forget of `k2`.
    struct NoForgetOfK2;
    impl Permit for NoForgetOfK2 {
        fn check(&self, op: &Op) -> Result<(), OpError> {
            match op {
                Op::Forget { key, .. } if key == "k2" => Err(OpError::new(
                    ErrorCode::PermissionDenied,
                    "no forget on k2",
                    json!({"permission": "forget", "key": "k2"}),
                )),
                _ => Ok(()),
            }
        }
    }

    #[test]
    fn a_refused_permit_rejects_the_whole_batch_and_is_remembered() {
        let mut map = Map::default();
        let mut batch = cmd(vec![write_m("k1", "1", &[]), forget_m("k2")], Some("r-1"));
        batch.is_batch = true;
        let ctx = Ctx {
            revision: 3,
            now_ms: 3000,
        };
        let (resp, effects) = execute(&batch, &map, &NoForgetOfK2, &ctx, RETENTION).unwrap();
        let CommandResponse::Rejected { error, op_index } = resp else {
            panic!("{resp:?}");
        };
        assert_eq!(
            (error.code, op_index),
            (ErrorCode::PermissionDenied, Some(1))
        );
        assert!(
            effects.iter().all(|e| matches!(e, Effect::PutDedup { .. })),
            "only the rejection's dedup record: {effects:?}"
        );
        assert_eq!(effects.len(), 1);
        // Permitted, the same batch (under a new request_id) applies both operations.
        let mut again = batch.clone();
        again.request_id = Some("r-2".into());
        let (resp, _) = map.run(&again, 4);
        assert_eq!(applied(&resp).len(), 2);
    }

    #[test]
    fn a_failing_source_is_an_error_not_a_rejection() {
        struct Broken;
        impl SlotSource for Broken {
            type Error = &'static str;
            fn slot(&self, _: &str) -> Result<Option<Slot>, &'static str> {
                Err("disk on fire")
            }
            fn dedup(&self, _: &str) -> Result<Option<DedupRecord>, &'static str> {
                Ok(None)
            }
        }
        let ctx = Ctx {
            revision: 1,
            now_ms: 1,
        };
        assert_eq!(
            execute(
                &cmd(vec![forget_m("k")], Some("x")),
                &Broken,
                &AllowAll,
                &ctx,
                1
            ),
            Err("disk on fire")
        );
    }

    /// What SPEC §2's table says one cell does.
    #[derive(Debug, PartialEq)]
    enum Cell {
        To(State),
        Already,
        Err(ErrorCode),
    }

    /// Every op with and without its flags, against a key in every state.
    fn ops() -> Vec<(&'static str, Op)> {
        let flagged = |clear, over| write_flags("k", "9", &[], clear, over).op;
        vec![
            ("write", flagged(false, false)),
            ("write+override", flagged(false, true)),
            ("write+clear", flagged(true, false)),
            ("forget", forget_m("k").op),
            ("revoke", revoke_m("k").op),
            (
                "reinstate",
                Op::Reinstate {
                    key: "k".into(),
                    actor: "a".into(),
                    reason: None,
                },
            ),
            (
                "flag_stale",
                Op::FlagStale {
                    key: "k".into(),
                    actor: "a".into(),
                    anchor: "tag:x".into(),
                    observed_hash: "h".into(),
                },
            ),
            (
                "supersede",
                Op::Supersede {
                    key: "k".into(),
                    by: "k2".into(),
                    actor: "a".into(),
                    reason: None,
                },
            ),
        ]
    }

    /// The key `k` in `state`, built through `execute` (`None`: absent).
    fn slot_in(state: State) -> Option<Slot> {
        let mut map = Map::default();
        let setup = match state {
            State::Absent => vec![],
            State::Active => vec![write_m("k", "1", &[])],
            State::Revoked => vec![write_m("k", "1", &[]), revoke_m("k")],
            State::Forgotten => vec![write_m("k", "1", &[]), forget_m("k")],
        };
        for (i, mutation) in setup.into_iter().enumerate() {
            map.run(&cmd(vec![mutation], None), i as u64 + 1);
        }
        map.slots.remove("k")
    }

    #[test]
    fn transition_table() {
        use Cell::*;
        use ErrorCode::*;
        use State::*;
        let states = [Absent, Active, Revoked, Forgotten];
        let table: [(&str, [Cell; 4]); 8] = [
            (
                "write",
                [To(Active), To(Active), Err(KeyRevoked), Err(KeyForgotten)],
            ),
            (
                "write+override",
                [To(Active), To(Active), To(Active), Err(KeyForgotten)],
            ),
            (
                "write+clear",
                [To(Active), To(Active), Err(KeyRevoked), To(Active)],
            ),
            (
                "forget",
                [To(Forgotten), To(Forgotten), To(Forgotten), Already],
            ),
            (
                "revoke",
                [Err(NotFound), To(Revoked), Already, Err(KeyForgotten)],
            ),
            (
                "reinstate",
                [Err(NotFound), Already, To(Active), Err(KeyForgotten)],
            ),
            (
                "flag_stale",
                [Err(NotFound), To(Active), To(Revoked), Err(KeyForgotten)],
            ),
            (
                "supersede",
                [Err(NotFound), To(Active), To(Revoked), Err(KeyForgotten)],
            ),
        ];
        let ctx = Ctx {
            revision: 100,
            now_ms: 100_000,
        };
        for ((name, op), (row, cells)) in ops().into_iter().zip(table) {
            assert_eq!(name, row);
            for (state, expected) in states.into_iter().zip(cells) {
                let slot = slot_in(state);
                let got = match apply(slot.as_ref(), &m(op.clone()), &ctx) {
                    Ok(c) if c.result.already == Some(true) => Already,
                    Ok(c) => To(c.slot.state),
                    Result::Err(e) => Err(e.code),
                };
                assert_eq!(got, expected, "{name} on {state}");
            }
        }
    }

    #[test]
    fn conditions_come_before_every_rule_including_idempotent_ones() {
        let ctx = Ctx {
            revision: 100,
            now_ms: 100_000,
        };
        for (name, op) in ops() {
            for state in [
                State::Absent,
                State::Active,
                State::Revoked,
                State::Forgotten,
            ] {
                let slot = slot_in(state);
                let current = slot.as_ref().map_or(0, |s| s.version);
                let wrong = Mutation {
                    op: op.clone(),
                    cond: Conditions {
                        expected_version: Some(current + 1),
                        based_on_revision: None,
                    },
                };
                let err = apply(slot.as_ref(), &wrong, &ctx).unwrap_err();
                assert_eq!(err.code, ErrorCode::VersionConflict, "{name} on {state}");
                let right = Mutation {
                    op: op.clone(),
                    cond: Conditions {
                        expected_version: Some(current),
                        based_on_revision: None,
                    },
                };
                let unconditional = apply(slot.as_ref(), &m(op.clone()), &ctx);
                assert_eq!(
                    apply(slot.as_ref(), &right, &ctx),
                    unconditional,
                    "{name} on {state}"
                );
            }
        }
    }
}
