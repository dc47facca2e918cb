//! The forget race (SPEC §1, failures 1 and 3) under `race/`: summarizer-like writers
//! read a key, "summarize" for a while, then write back conditioned on what they read
//! (`based_on_revision` or `expected_version`), while a forgetter forgets the same keys
//! and later re-establishes them with `clear_tombstone`. A forget that returned 200 must
//! win against every conditioned write that started from older data.

use std::time::Duration;

use cairn_api::Consistency;
use cairn_client::new_request_id;
use rand::Rng;

use super::exec;
use super::Ctx;
use crate::chaos::history::{Input, Workload};

pub const KEYS: usize = 3;

pub fn key(i: usize) -> String {
    format!("race/k{i}")
}

/// Reads, waits, writes back conditioned on the read.
pub async fn summarizer(ctx: Ctx, process: u64) {
    let mut rng = ctx.rng(process);
    let client = ctx.client();
    while ctx.running() {
        let k = key(rng.gen_range(0..KEYS));
        let read = Input::Read {
            key: k.clone(),
            consistency: Consistency::Linearizable,
            max_staleness_ms: None,
            session: false,
            node: None,
            known: None,
            handoff_forget_version: None,
        };
        let record = exec::read(&ctx.rec, process, Workload::ForgetRace, &client, read).await;
        let Some(found) = record.read() else {
            ctx.pause(&mut rng).await;
            continue;
        };
        let (revision, version) = found.as_ref().map_or((0, 0), |r| (r.revision, r.version));
        // The summarizing: long enough for a forget to slip in between.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..150))).await;
        let conditioned_on_revision = rng.gen_bool(0.6);
        let write = Input::Write {
            key: k,
            value: ctx.rec.unique_value(),
            expected_version: (!conditioned_on_revision).then_some(version),
            based_on_revision: conditioned_on_revision.then_some(revision),
            clear_tombstone: false,
            override_revocation: false,
            request_id: new_request_id(),
        };
        exec::mutate(&ctx.rec, process, Workload::ForgetRace, &client, write).await;
        ctx.pause(&mut rng).await;
    }
}

/// Forgets a key, waits, re-establishes it deliberately with `clear_tombstone`.
pub async fn forgetter(ctx: Ctx, process: u64) {
    let mut rng = ctx.rng(process);
    let client = ctx.client();
    while ctx.running() {
        let k = key(rng.gen_range(0..KEYS));
        let forget = Input::Forget {
            key: k.clone(),
            expected_version: None,
            request_id: new_request_id(),
        };
        exec::mutate(&ctx.rec, process, Workload::ForgetRace, &client, forget).await;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(100..400))).await;
        if !ctx.running() {
            break;
        }
        let recreate = Input::Write {
            key: k,
            value: ctx.rec.unique_value(),
            expected_version: None,
            based_on_revision: None,
            clear_tombstone: true,
            override_revocation: false,
            request_id: new_request_id(),
        };
        exec::mutate(&ctx.rec, process, Workload::ForgetRace, &client, recreate).await;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(100..400))).await;
    }
}
