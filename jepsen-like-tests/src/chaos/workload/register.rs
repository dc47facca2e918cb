//! The per-key register workload under `reg/`: every operation the key model has, on a
//! few hot keys so operations on a key overlap.
//!
//! Mutations go through a client with a session (to the leader, or a third of them
//! through a random node that forwards them), so the session's reads (bounded and any,
//! pinned to a random node) have marks to be checked against. Linearizable reads
//! use a client without a session (they need none), and some bounded reads do too (the
//! bounded-staleness guarantee must hold without a session's `min_revision` help).

use std::collections::HashMap;

use cairn_api::Consistency;
use cairn_client::{new_request_id, Client, Session};
use rand::rngs::StdRng;
use rand::Rng;

use super::exec;
use super::Ctx;
use crate::chaos::history::{Input, Mark, Workload};
use crate::chaos::supervisor::endpoint;

/// Hot keys: few enough that operations overlap, enough that the search stays small.
pub const KEYS: usize = 10;
/// Staleness bounds asked of bounded reads, ms.
const STALENESS_MS: [u64; 3] = [200, 500, 1_000];

pub fn key(i: usize) -> String {
    format!("reg/k{i}")
}

/// One register process.
pub async fn run(ctx: Ctx, process: u64) {
    let mut rng = ctx.rng(process);
    let plain = ctx.client();
    let with_session = ctx.client().with_session(Session::new());
    // Last version this process saw per key: CAS writes expect it.
    let mut seen: HashMap<String, u64> = HashMap::new();
    while ctx.running() {
        let k = key(rng.gen_range(0..KEYS));
        let roll = rng.gen_range(0..100);
        let record = if roll < 52 {
            let input = mutation(&ctx, &mut rng, &k, roll, &seen);
            // A third of the mutations enter through a random node, so follower
            // forwarding is exercised under faults too.
            let client = if rng.gen_bool(0.33) {
                let node = ctx.random_node(&mut rng);
                with_session
                    .pinned(&endpoint(node))
                    .expect("valid endpoint")
            } else {
                with_session.clone()
            };
            exec::mutate(&ctx.rec, process, Workload::Register, &client, input).await
        } else {
            let (client, input) = read(&ctx, &mut rng, &k, roll, &plain, &with_session);
            exec::read(&ctx.rec, process, Workload::Register, &client, input).await
        };
        for r in record.mut_results() {
            seen.insert(r.key.clone(), r.version);
        }
        if let Some(Some(r)) = record.read() {
            seen.insert(k.clone(), r.version);
        }
        ctx.pause(&mut rng).await;
    }
}

fn mutation(ctx: &Ctx, rng: &mut StdRng, k: &str, roll: u32, seen: &HashMap<String, u64>) -> Input {
    let request_id = new_request_id();
    let write = |key: &str, clear: bool, expected: Option<u64>, request_id: String| Input::Write {
        key: key.to_string(),
        value: ctx.rec.unique_value(),
        expected_version: expected,
        based_on_revision: None,
        clear_tombstone: clear,
        override_revocation: false,
        request_id,
    };
    match roll {
        0..=19 => write(k, false, None, request_id),
        20..=26 => {
            // CAS: usually the version last seen (may be stale: a definite 409 then).
            let expected = seen.get(k).copied().unwrap_or(0) + u64::from(rng.gen_bool(0.1));
            write(k, false, Some(expected), request_id)
        }
        27..=34 => write(k, true, None, request_id),
        35..=38 => Input::Forget {
            key: k.to_string(),
            expected_version: None,
            request_id,
        },
        39..=41 => Input::Revoke {
            key: k.to_string(),
            request_id,
        },
        42..=45 => Input::Reinstate {
            key: k.to_string(),
            request_id,
        },
        _ => {
            // A batch over two distinct keys: all or nothing.
            let other = loop {
                let o = key(rng.gen_range(0..KEYS));
                if o != k {
                    break o;
                }
            };
            let second = if rng.gen_bool(0.3) {
                Input::Forget {
                    key: other,
                    expected_version: None,
                    request_id: String::new(),
                }
            } else {
                write(&other, rng.gen_bool(0.3), None, String::new())
            };
            Input::Batch {
                ops: vec![write(k, false, None, String::new()), second],
                request_id,
            }
        }
    }
}

fn read(
    ctx: &Ctx,
    rng: &mut StdRng,
    k: &str,
    roll: u32,
    plain: &Client,
    with_session: &Client,
) -> (Client, Input) {
    let node = ctx.random_node(rng);
    let pinned = |c: &Client| c.pinned(&endpoint(node)).expect("valid endpoint");
    let known = |c: &Client| {
        c.session().and_then(|s| s.key(k)).map(|m| Mark {
            generation: m.generation,
            forget_epoch: m.forget_epoch,
            version: m.version,
        })
    };
    let staleness = STALENESS_MS[rng.gen_range(0..STALENESS_MS.len())];
    let (client, consistency, session, pin) = match roll {
        52..=73 => (plain.clone(), Consistency::Linearizable, false, None),
        74..=82 => (pinned(with_session), Consistency::Bounded, true, Some(node)),
        83..=90 => (pinned(plain), Consistency::Bounded, false, Some(node)),
        _ => (pinned(with_session), Consistency::Any, true, Some(node)),
    };
    let input = Input::Read {
        key: k.to_string(),
        consistency,
        max_staleness_ms: (consistency == Consistency::Bounded).then_some(staleness),
        session,
        node: pin,
        known: if session { known(&client) } else { None },
        handoff_forget_version: None,
    };
    (client, input)
}
