//! Exactly-once retries (SPEC §2) under `retry/`: a write's response is dropped on
//! purpose (the request future is abandoned a few ms after sending, or the one-shot
//! client times out), then the identical request is resent under the same `request_id`
//! until a definite answer comes back. Sometimes an acknowledged write is resent once
//! more, as a client that missed the ack would, and recorded as its own operation: the
//! node must replay the original result (`replayed: true`, same version).
//!
//! Each key has this process as its only writer, so the n-th acknowledged write of a key
//! must have version n. An operation that stays unresolved poisons that accounting, so
//! the process moves on to a fresh key; so it does after `KEY_WRITES_MAX` acknowledged
//! writes, which keeps every key's history within what `POST /v1/history` returns (10 000
//! events), so the checker can account for every write (a 30-minute campaign once wrote
//! 67 000 times to one key and could not).

use std::time::{Duration, Instant};

use cairn_client::new_request_id;
use rand::Rng;

use super::exec::{self, mutation_outcome, send_mutation};
use super::Ctx;
use crate::chaos::history::{Input, Outcome, Output, Workload};

/// How long one operation may keep resending before it is left `info`.
const RESOLVE_FOR: Duration = Duration::from_secs(8);
const RESEND_PAUSE: Duration = Duration::from_millis(100);
/// Acknowledged writes per key before moving on (well under the 10 000-event history page).
const KEY_WRITES_MAX: u64 = 5_000;

pub async fn run(ctx: Ctx, process: u64) {
    let mut rng = ctx.rng(process);
    let one_shot = ctx.one_shot_client();
    let patient = ctx.client();
    let mut key_index = 0u64;
    let mut key = format!("retry/p{process}/k{key_index}");
    let mut acknowledged = 0u64;
    while ctx.running() {
        let input = Input::Write {
            key: key.clone(),
            value: ctx.rec.unique_value(),
            expected_version: None,
            based_on_revision: None,
            clear_tombstone: false,
            override_revocation: false,
            request_id: new_request_id(),
        };
        let mut pending = ctx.rec.invoke(process, Workload::Retries, input);
        // Drop the response: abandon the call after a few ms (it may or may not have
        // reached the leader and been applied by then).
        let cut_after = Duration::from_millis(rng.gen_range(1..40));
        let first = tokio::time::timeout(cut_after, send_mutation(&one_shot, &pending.input)).await;
        let (mut outcome, mut output) = match first {
            Ok(answer) => mutation_outcome(answer),
            Err(_) => (
                Outcome::Info,
                Output::Error {
                    code: "dropped".into(),
                    message: format!("response abandoned after {cut_after:?}"),
                    op_index: None,
                },
            ),
        };
        let started = Instant::now();
        while outcome == Outcome::Info && started.elapsed() < RESOLVE_FOR {
            ctx.rec.retrying(&mut pending, &output);
            (outcome, output) = mutation_outcome(send_mutation(&patient, &pending.input).await);
            if outcome == Outcome::Info {
                tokio::time::sleep(RESEND_PAUSE).await;
            }
        }
        let input = pending.input.clone();
        ctx.rec.complete(pending, outcome, output);
        acknowledged += u64::from(outcome == Outcome::Ok);
        if outcome == Outcome::Info || acknowledged >= KEY_WRITES_MAX {
            key_index += 1;
            key = format!("retry/p{process}/k{key_index}");
            acknowledged = 0;
        } else if outcome == Outcome::Ok && rng.gen_bool(0.3) {
            // A duplicate delivery of an acknowledged request: must be replayed.
            exec::mutate(&ctx.rec, process, Workload::Retries, &patient, input).await;
        }
        ctx.pause(&mut rng).await;
    }
}
