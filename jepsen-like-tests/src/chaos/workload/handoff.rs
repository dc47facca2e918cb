//! Session handoff (SPEC §3): agent A writes a fresh key and forgets it through one node,
//! exports its session token; agent B imports the token and reads the key from another
//! node with consistency `any`. B must never see the forgotten value, however far behind
//! that node is (the token's `min_revision` and marks make the client wait or retry).

use cairn_api::Consistency;
use cairn_client::{new_request_id, Session};

use super::exec;
use super::Ctx;
use crate::chaos::history::{Input, Mark, Outcome, Workload};
use crate::chaos::supervisor::endpoint;

pub async fn run(ctx: Ctx, process: u64) {
    let mut rng = ctx.rng(process);
    let mut n = 0u64;
    while ctx.running() {
        n += 1;
        let key = format!("hand/p{process}/k{n}");
        let from = ctx.random_node(&mut rng);
        let to = loop {
            let to = ctx.random_node(&mut rng);
            if to != from || ctx.nodes.len() == 1 {
                break to;
            }
        };
        let a = ctx
            .client()
            .with_session(Session::new())
            .pinned(&endpoint(from))
            .expect("valid endpoint");
        let write = Input::Write {
            key: key.clone(),
            value: ctx.rec.unique_value(),
            expected_version: None,
            based_on_revision: None,
            clear_tombstone: false,
            override_revocation: false,
            request_id: new_request_id(),
        };
        let written = exec::mutate(&ctx.rec, process, Workload::Handoff, &a, write).await;
        let forget = Input::Forget {
            key: key.clone(),
            expected_version: None,
            request_id: new_request_id(),
        };
        let forgot = exec::mutate(&ctx.rec, process, Workload::Handoff, &a, forget).await;
        let (Outcome::Ok, Some(f)) = (written.outcome, forgot.mut_results().first()) else {
            // Without an acknowledged forget there is nothing to hand off.
            ctx.pause(&mut rng).await;
            continue;
        };
        let forget_version = f.version;
        let token = a.session().expect("A has a session").export_token();
        let session = match Session::import_token(&token) {
            Ok(s) => s,
            Err(e) => panic!("a token this client exported does not import: {e}"),
        };
        let known = session.key(&key).map(|m| Mark {
            generation: m.generation,
            forget_epoch: m.forget_epoch,
            version: m.version,
        });
        let b = ctx
            .client()
            .with_session(session)
            .pinned(&endpoint(to))
            .expect("valid endpoint");
        let read = Input::Read {
            key,
            consistency: Consistency::Any,
            max_staleness_ms: None,
            session: true,
            node: Some(to),
            known,
            handoff_forget_version: Some(forget_version),
        };
        exec::read(&ctx.rec, process, Workload::Handoff, &b, read).await;
        ctx.pause(&mut rng).await;
    }
}
