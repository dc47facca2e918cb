//! The human form of each response (without `--json`): the rendered note first for reads,
//! aligned `key: value` fields, tables.

use cairn_client::api::{
    AclChanged, AuthEnabled, BatchResult, ClusterStatus, CreatedPrincipal, HistoryEvent,
    HistoryResponse, ListResponse, MembershipResponse, MutationResult, PrincipalList,
    ProbeResponse, ReadResponse, RecallResponse, RotatedToken, Served, Tombstone, WatchEvent,
    WhoAmI,
};

use crate::args::format_grants;
use crate::output::{joined, print_fields, print_table, say, shell_word, wire_name};
use crate::Result;

pub fn print_mutation(result: &MutationResult) {
    print_fields(&mutation_fields(result));
}

fn mutation_fields(r: &MutationResult) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("key", r.key.clone()),
        ("state", r.state.to_string()),
        ("version", r.version.to_string()),
        ("generation", r.generation.to_string()),
        ("forget_epoch", r.forget_epoch.to_string()),
        ("revision", r.revision.to_string()),
    ];
    if r.replayed {
        fields.push((
            "replayed",
            "true (original answer of this request_id)".into(),
        ));
    }
    if r.already == Some(true) {
        fields.push(("already", "true (nothing changed)".into()));
    }
    if let Some(tombstone) = &r.tombstone {
        fields.push(("tombstone", tombstone.id.clone()));
    }
    fields
}

pub fn print_batch(batch: &BatchResult) {
    print_fields(&[
        ("revision", batch.revision.to_string()),
        ("replayed", batch.replayed.to_string()),
    ]);
    let rows = batch.results.iter().map(|r| {
        vec![
            r.key.clone(),
            r.state.to_string(),
            r.version.to_string(),
            r.generation.to_string(),
            r.forget_epoch.to_string(),
        ]
    });
    print_table(
        &["KEY", "STATE", "VERSION", "GENERATION", "FORGET_EPOCH"],
        rows.collect(),
    );
}

pub fn print_read(read: &ReadResponse) {
    let r = &read.record;
    say(&r.rendered);
    let mut fields = vec![
        ("state", r.state.to_string()),
        ("version", r.version.to_string()),
        ("generation", r.generation.to_string()),
        ("forget_epoch", r.forget_epoch.to_string()),
        ("revision", r.revision.to_string()),
        ("create_revision", r.create_revision.to_string()),
        ("actor", r.meta.actor.clone()),
        ("updated_at", r.meta.updated_at.to_string()),
    ];
    let optional = [
        ("source", r.meta.source.clone()),
        (
            "anchors",
            (!r.meta.anchors.is_empty()).then(|| joined(&r.meta.anchors)),
        ),
        (
            "tags",
            (!r.meta.tags.is_empty()).then(|| joined(&r.meta.tags)),
        ),
        (
            "tombstone",
            r.tombstone
                .as_ref()
                .map(|t| format!("{} ({})", t.id, t.reason)),
        ),
        (
            "revocation",
            r.revocation
                .as_ref()
                .map(|v| format!("by {}: {}", v.actor, v.reason)),
        ),
        (
            "stale",
            (!r.stale.is_empty()).then(|| joined(&stale_anchors(read))),
        ),
        ("superseded_by", r.superseded_by.clone()),
    ];
    fields.extend(
        optional
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?))),
    );
    fields.push(("served", served_line(&read.served)));
    print_fields(&fields);
}

fn stale_anchors(read: &ReadResponse) -> Vec<String> {
    read.record.stale.iter().map(|f| f.anchor.clone()).collect()
}

fn served_line(s: &Served) -> String {
    format!(
        "node {} ({}, {}, applied {}, {})",
        s.node_id,
        s.role,
        s.consistency.as_str(),
        s.applied_index,
        s.ms_since_leader_contact.map_or_else(
            || "no leader contact yet".to_string(),
            |ms| format!("leader contact {ms} ms ago")
        )
    )
}

pub fn print_probe(p: &ProbeResponse) {
    print_fields(&[
        ("key", p.key.clone()),
        ("state", p.state.to_string()),
        ("value_present", p.value_present.to_string()),
        ("retention_present", p.retention_present.to_string()),
        ("version", p.version.to_string()),
        ("generation", p.generation.to_string()),
        ("forget_epoch", p.forget_epoch.to_string()),
        ("tombstone_id", p.tombstone_id.clone().unwrap_or_default()),
        ("value_revision", p.value_revision.to_string()),
        ("log_purged_through", p.log_purged_through.to_string()),
        ("served", served_line(&p.served)),
    ]);
}

pub fn print_history(h: &HistoryResponse) {
    let rows = h.events.iter().map(|e| {
        vec![
            e.version.to_string(),
            e.revision.to_string(),
            wire_name(&e.kind),
            e.actor.clone(),
            e.at.to_string(),
            e.value_hash.as_deref().map(short_hash).unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
            event_detail(e),
        ]
    });
    print_table(
        &[
            "VERSION",
            "REVISION",
            "KIND",
            "ACTOR",
            "AT",
            "VALUE_HASH",
            "REASON",
            "DETAIL",
        ],
        rows.collect(),
    );
}

/// What a `superseded` or `stale_flagged` event records besides its reason.
fn event_detail(e: &HistoryEvent) -> String {
    match (&e.by, &e.anchor, &e.observed_hash) {
        (Some(by), _, _) => format!("by {by}"),
        (None, Some(anchor), Some(hash)) => format!("{anchor} observed {}", short_hash(hash)),
        (None, Some(anchor), None) => anchor.clone(),
        _ => String::new(),
    }
}

/// Enough of a sha256 to tell values apart by eye; `--json` has the whole hash.
fn short_hash(hash: &str) -> String {
    hash.chars().take(12).collect()
}

pub fn print_tombstone(t: &Tombstone) {
    print_fields(&[
        ("id", t.id.clone()),
        ("key", t.key.clone()),
        ("actor", t.actor.clone()),
        ("reason", t.reason.clone()),
        (
            "value_hash",
            t.value_hash
                .clone()
                .unwrap_or_else(|| "none (pre-emptive)".into()),
        ),
        ("forgotten_at", t.forgotten_at.to_string()),
        ("version", t.version.to_string()),
        ("generation", t.generation.to_string()),
        ("revision", t.revision.to_string()),
    ]);
}

pub fn print_list(list: &ListResponse) {
    let rows = list.items.iter().map(|r| {
        vec![
            r.key.clone(),
            r.state.to_string(),
            r.version.to_string(),
            r.revision.to_string(),
            r.rendered.clone(),
        ]
    });
    print_table(
        &["KEY", "STATE", "VERSION", "REVISION", "RENDERED"],
        rows.collect(),
    );
    if let Some(after) = &list.next_after {
        // A key that starts with `-` would be read as a flag after a space.
        let separator = if after.starts_with('-') { "=" } else { " " };
        say(format_args!(
            "more: --after{separator}{}",
            shell_word(after)
        ));
    }
}

pub fn print_recall(recall: &RecallResponse) {
    if recall.notes.is_empty() {
        say("no note matches these cues");
    }
    for note in &recall.notes {
        say(&note.rendered);
        say(format_args!("    matched: {}", joined(&note.matched)));
    }
}

pub fn print_watch_event(e: &WatchEvent) {
    say(format_args!(
        "{} {} {} state={} version={} generation={} forget_epoch={}",
        e.revision,
        wire_name(&e.kind),
        e.key,
        e.state,
        e.version,
        e.generation,
        e.forget_epoch
    ));
}

pub fn print_membership(m: &MembershipResponse) {
    print_fields(&[
        ("voters", joined(&m.voters)),
        ("learners", joined(&m.learners)),
    ]);
    let rows = m
        .nodes
        .iter()
        .map(|n| vec![n.id.to_string(), n.client_addr.clone(), n.peer_addr.clone()]);
    print_table(&["ID", "CLIENT_ADDR", "PEER_ADDR"], rows.collect());
    if let Some(auth) = &m.auth {
        say("");
        print_auth_enabled(auth);
    }
}

// -- auth (SPEC §8) ---------------------------------------------------------------------------

/// Follows every token shown: the node keeps only its hash.
const TOKEN_NOTE: &str = "store it now; it is not shown again (only its hash is kept)";

pub fn print_auth_enabled(a: &AuthEnabled) {
    print_fields(&[
        ("auth", "on".into()),
        ("admin", a.admin.clone()),
        ("acl_revision", a.acl_revision.to_string()),
        ("token", a.token.clone()),
    ]);
    say(TOKEN_NOTE);
}

pub fn print_created_principal(c: &CreatedPrincipal) {
    print_fields(&[("principal", c.name.clone()), ("token", c.token.clone())]);
    say(TOKEN_NOTE);
}

pub fn print_rotated_token(r: &RotatedToken) {
    print_fields(&[("token", r.token.clone())]);
    say(format!("{TOKEN_NOTE}; the old token no longer works"));
}

pub fn print_acl_changed(a: &AclChanged) {
    print_fields(&[
        ("principal", a.name.clone()),
        ("acl_revision", a.acl_revision.to_string()),
    ]);
}

pub fn print_principals(list: &PrincipalList) {
    let rows = list.principals.iter().map(|p| {
        vec![
            p.name.clone(),
            p.created_by.clone(),
            p.created_at.to_string(),
            format_grants(&p.grants),
        ]
    });
    print_table(
        &["NAME", "CREATED_BY", "CREATED_AT", "GRANTS"],
        rows.collect(),
    );
}

pub fn print_whoami(w: &WhoAmI) {
    print_fields(&[
        ("principal", w.name.clone()),
        ("grants", format_grants(&w.grants)),
        ("acl_revision", w.acl_revision.to_string()),
    ]);
}

pub fn print_status_table(rows: &[(String, Result<ClusterStatus>)]) {
    let headers = [
        "ENDPOINT",
        "ID",
        "ROLE",
        "LEADER",
        "TERM",
        "LAST_LOG",
        "COMMIT",
        "APPLIED",
        "PURGED",
        "CONTACT_MS",
    ];
    let table = rows.iter().map(|(endpoint, answer)| match answer {
        Ok(s) => vec![
            endpoint.clone(),
            s.node_id.to_string(),
            s.role.clone(),
            s.leader_id.map_or("-".into(), |id| id.to_string()),
            s.term.to_string(),
            s.last_log_index.to_string(),
            s.commit_index.to_string(),
            s.applied_index.to_string(),
            s.log_purged_through.to_string(),
            s.ms_since_leader_contact
                .map_or("-".into(), |ms| ms.to_string()),
        ],
        Err(err) => vec![endpoint.clone(), format!("error: {err}")],
    });
    print_table(&headers, table.collect());
}
