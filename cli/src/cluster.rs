//! `cairn cluster …`: membership changes at the leader, and status, health, compaction and
//! metrics per endpoint.

use serde::Serialize;
use serde_json::{json, Value};

use cairn_client::api::{ClusterStatus, EnableAuthRequest, Health, InitRequest, NodeSpec};
use cairn_client::ClientError;
use cairn_config::{CLIENT_PORT_BASE, DEFAULT_HOST, PEER_PORT_BASE};

use crate::args::{non_empty, ClusterCommand};
use crate::output::{print_table, say, to_json};
use crate::render::{print_membership, print_status_table};
use crate::{Ctx, Result};

/// `cluster init` without `--node`: the local nodes of `scripts/cluster up`.
const LOCAL_NODES: u64 = 3;

pub async fn run(ctx: &Ctx, command: ClusterCommand) -> Result<()> {
    let client = &ctx.client;
    match command {
        ClusterCommand::Status => status(ctx).await,
        ClusterCommand::Health { endpoints } => health(ctx, endpoints).await,
        ClusterCommand::Init { nodes, auth_admin } => {
            let nodes = non_empty(nodes).unwrap_or_else(local_nodes);
            let auth = auth_admin.map(|admin| EnableAuthRequest { admin });
            // With auth, the answer carries the admin's token: printed this once.
            ctx.emit(
                &client.init(InitRequest { nodes, auth }).await?,
                print_membership,
            )
        }
        ClusterCommand::Join(a) => {
            let node = NodeSpec {
                id: a.id,
                client_addr: a.client_addr,
                peer_addr: a.peer_addr,
            };
            ctx.emit(&client.join(node).await?, print_membership)
        }
        ClusterCommand::Remove { id } => ctx.emit(&client.remove(id).await?, print_membership),
        ClusterCommand::Compact { endpoints } => compact(ctx, endpoints).await,
        ClusterCommand::Metrics { endpoint } => {
            let endpoint = endpoint.unwrap_or_else(|| client.endpoints()[0].clone());
            client.metrics(&endpoint).await?.lines().for_each(say);
            Ok(())
        }
    }
}

/// The nodes of `scripts/cluster up`, each at the default addresses of its id (the node's
/// own defaults, from `cairn-config`).
pub fn local_nodes() -> Vec<NodeSpec> {
    let addr = |base: u16, id: u64| format!("{DEFAULT_HOST}:{}", u64::from(base) + id);
    (1..=LOCAL_NODES)
        .map(|id| NodeSpec {
            id,
            client_addr: addr(CLIENT_PORT_BASE, id),
            peer_addr: addr(PEER_PORT_BASE, id),
        })
        .collect()
}

/// One row per endpoint; succeeds if any endpoint answered.
async fn status(ctx: &Ctx) -> Result<()> {
    let endpoints = ctx.client.endpoints().to_vec();
    let answers = futures::future::join_all(endpoints.iter().map(|e| ctx.client.status(e))).await;
    let rows: Vec<(String, Result<ClusterStatus>)> = endpoints.into_iter().zip(answers).collect();
    if ctx.json {
        say(to_json(&per_endpoint_json(&rows, "status"))?);
    } else {
        print_status_table(&rows);
    }
    match rows.iter().any(|(_, answer)| answer.is_ok()) {
        true => Ok(()),
        false => Err(first_error(rows)),
    }
}

/// One row per endpoint (all asked at once); fails if any node is unhealthy or silent, so
/// a script can wait on it.
async fn health(ctx: &Ctx, endpoints: Vec<String>) -> Result<()> {
    let endpoints = non_empty(endpoints).unwrap_or_else(|| ctx.client.endpoints().to_vec());
    let answers = futures::future::join_all(endpoints.iter().map(|e| ctx.client.healthz(e))).await;
    let rows: Vec<(String, Result<Health>)> = endpoints.into_iter().zip(answers).collect();
    if ctx.json {
        say(to_json(&per_endpoint_json(&rows, "health"))?);
    } else {
        let table = rows.iter().map(|(endpoint, answer)| match answer {
            Ok(h) => vec![endpoint.clone(), h.node_id.to_string(), h.role.clone()],
            Err(err) => vec![endpoint.clone(), format!("error: {err}")],
        });
        print_table(&["ENDPOINT", "ID", "ROLE"], table.collect());
    }
    match rows.iter().all(|(_, answer)| answer.is_ok()) {
        true => Ok(()),
        false => Err(first_error(rows)),
    }
}

/// Compacts each endpoint in turn (one at a time: compaction is I/O heavy); fails if any
/// node failed.
async fn compact(ctx: &Ctx, endpoints: Vec<String>) -> Result<()> {
    let endpoints = non_empty(endpoints).unwrap_or_else(|| ctx.client.endpoints().to_vec());
    let mut rows = Vec::new();
    for endpoint in endpoints {
        let answer = ctx.client.compact(&endpoint).await;
        rows.push((endpoint, answer));
    }
    if ctx.json {
        say(to_json(&per_endpoint_json(&rows, "compact"))?);
    } else {
        let table = rows.iter().map(|(endpoint, answer)| match answer {
            Ok(c) => vec![
                endpoint.clone(),
                c.snapshot_index.to_string(),
                c.log_purged_through.to_string(),
            ],
            Err(err) => vec![endpoint.clone(), format!("error: {err}")],
        });
        print_table(
            &["ENDPOINT", "SNAPSHOT", "LOG_PURGED_THROUGH"],
            table.collect(),
        );
    }
    match rows.iter().all(|(_, answer)| answer.is_ok()) {
        true => Ok(()),
        false => Err(first_error(rows)),
    }
}

fn per_endpoint_json<T: Serialize>(rows: &[(String, Result<T>)], field: &str) -> Value {
    let rows = rows.iter().map(|(endpoint, answer)| match answer {
        Ok(value) => json!({ "endpoint": endpoint, field: value }),
        Err(err) => json!({
            "endpoint": endpoint,
            "error": { "code": err.name(), "message": err.to_string() },
        }),
    });
    Value::Array(rows.collect())
}

fn first_error<T>(rows: Vec<(String, Result<T>)>) -> ClientError {
    rows.into_iter()
        .find_map(|(_, answer)| answer.err())
        .unwrap_or_else(|| ClientError::InvalidInput {
            message: "no endpoints".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_nodes_are_the_three_of_scripts_cluster() {
        let local = local_nodes();
        assert_eq!(local.len(), 3);
        assert_eq!(
            (
                local[2].id,
                local[2].client_addr.as_str(),
                local[2].peer_addr.as_str()
            ),
            (3, "127.0.0.1:7403", "127.0.0.1:7503")
        );
    }
}
