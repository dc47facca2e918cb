//! Wiring: set up transport security, open the data dir and storage, start Raft, the
//! batcher, the read gate and both HTTP(S) servers; stop them all, in order, on shutdown.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cairn_config::{NodeConfig, PeerProof};
use rustls_pki_types::UnixTime;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::{self, App};
use crate::consensus::batcher::Batcher;
use crate::consensus::config::openraft_config;
use crate::consensus::log_store::LogStore;
use crate::consensus::reads::ReadGate;
use crate::consensus::snapshot_trigger::SnapshotTrigger;
use crate::consensus::state_machine::StateMachine;
use crate::consensus::view::StateView;
use crate::consensus::{NodeId, Raft};
use crate::datadir::{DataDir, DataDirError};
use crate::metrics::Metrics;
use crate::native_heap;
use crate::raft_rpc::admission::{Admission, AdmissionState};
use crate::raft_rpc::network::{NetworkFactory, PeerClient};
use crate::raft_rpc::proof::{ClientProof, PeerSecret, ServerProof};
use crate::raft_rpc::server as peer_server;
use crate::raft_rpc::vouch::Vouches;
use crate::serve::{serve, ConnectionBound, ServeOptions};
use crate::store::{blob_gc, Engine, EngineOptions, LogEngine, SnapshotDir, StateEngine};
use crate::tls::configs::{self as tls_configs, PeerTls};
use crate::tls::validity;
use openraft::storage::RaftLogStorage;

/// How often the node checks whether Raft stopped on a fatal error (then it exits).
const FATAL_POLL: Duration = Duration::from_millis(100);
/// Open connections on the peer port: a cluster has at most 64 members (SPEC §6), each
/// with a few connections to this node (appends, votes, ReadIndex, snapshots).
const PEER_CONNECTIONS_MAX: usize = 1024;
/// A relay connection idle this long is closed by this node, before the leader's client
/// port would close it (`limits.request_head_timeout_ms`, 30 s by default): a request sent
/// on a connection the other side is closing at that moment would fail.
const RELAY_IDLE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long servers get to finish in-flight requests at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// The log target of the start-up warnings SPEC §8 asks for "at every start": the node's
/// log filter always lets its warnings through, whatever `log_level` or `RUST_LOG` say.
pub const START_WARNINGS: &str = "cairn_node::start";

/// Why [`run`] failed. The binary exits 2 for [`RunError::Config`], 1 for the rest.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration names something the node cannot use: a certificate, key or peer
    /// secret that cannot be loaded (before anything else is touched), or a data dir
    /// that belongs to another node id or is not a directory.
    #[error(transparent)]
    Config(anyhow::Error),
    /// Anything else: the data dir's disk or lock, a port, storage, Raft.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

/// Runs a node until `stop` resolves, then shuts it down cleanly.
///
/// - Nothing is written before both ports are bound: a node refused at start (a port in
///   use) leaves no data dir behind, so none is tied to its id.
pub async fn run(config: NodeConfig, stop: impl Future<Output = ()>) -> Result<(), RunError> {
    let transport = Transport::load(&config).map_err(RunError::Config)?;
    transport.announce(&config);
    let listeners = Listeners {
        client: bind(&config.client_addr, "client").await?,
        peer: bind(&config.peer_addr, "peer").await?,
    };
    let data_dir = DataDir::open(&config.data_dir, config.id).map_err(|e| match e {
        DataDirError::WrongNode { .. } | DataDirError::NotADirectory(_) => {
            RunError::Config(e.into())
        }
        DataDirError::Io { ref source, .. }
            if source.kind() == std::io::ErrorKind::NotADirectory =>
        {
            RunError::Config(e.into())
        }
        other => RunError::Failed(other.into()),
    })?;
    Ok(run_with(config, transport, listeners, data_dir, stop).await?)
}

/// The two bound ports.
struct Listeners {
    client: TcpListener,
    peer: TcpListener,
}

/// [`run`] once the transport's certificates, keys and secret are loaded, both ports are
/// bound and the data dir is locked.
async fn run_with(
    config: NodeConfig,
    transport: Transport,
    listeners: Listeners,
    data_dir: DataDir,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let Listeners {
        client: client_listener,
        peer: peer_listener,
    } = listeners;
    let client_shown = bound_address(&config.client_addr, &client_listener);
    let peer_shown = bound_address(&config.peer_addr, &peer_listener);
    let storage = Storage::open(&config, &data_dir)?;
    let engine = storage.engine.clone();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let node = start(&config, &transport, storage, &data_dir, shutdown_rx.clone()).await?;
    tokio::spawn(native_heap::trim_periodically(shutdown_rx.clone()));
    tokio::spawn(steer_blob_gc_periodically(
        engine.clone(),
        shutdown_rx.clone(),
    ));

    let [(_, _, client_end), (_, _, peer_end)] = transport.certificate_ends();
    let metrics = &node.app.metrics;
    metrics
        .client_cert_not_after
        .store(client_end.unwrap_or(0), Ordering::Relaxed);
    metrics
        .peer_cert_not_after
        .store(peer_end.unwrap_or(0), Ordering::Relaxed);
    let head_timeout = Duration::from_millis(config.limits.request_head_timeout_ms);
    let client_server = serve(
        client_listener,
        ServeOptions {
            port: "client",
            tls: transport.client_port.clone(),
            connections: node.app.connections.clone(),
            head_timeout,
            handshakes_failed: node.app.metrics.client_handshakes_failed.clone(),
        },
        api::router(node.app.clone()),
        shutdown_rx.clone(),
    );
    let peer_server = serve(
        peer_listener,
        ServeOptions {
            port: "peer",
            tls: transport.peer_tls.as_ref().map(|t| t.server.clone()),
            connections: ConnectionBound::new(PEER_CONNECTIONS_MAX),
            head_timeout,
            handshakes_failed: node.app.metrics.peer_handshakes_failed.clone(),
        },
        peer_server::router(
            node.raft.clone(),
            transport.server_proof.clone(),
            node.app.admission.clone(),
            Vouches::new(
                node.raft.clone(),
                node.app.peers.clone(),
                node.app.metrics.clone(),
            ),
            node.app.metrics.clone(),
        ),
        shutdown_rx,
    );
    tracing::info!(
        id = config.id,
        client = %client_shown,
        peer = %peer_shown,
        client_tls = transport.client_port.is_some(),
        peer_proof = ?config.peer_proof(),
        admitted = node.app.admission.state() == AdmissionState::Admitted,
        "node ready"
    );

    // A fatal Raft error (storage failure, internal panic) stops the core but not the
    // process; a node that cannot make progress must not keep serving, so it exits.
    let failed = tokio::select! {
        _ = stop => None,
        reason = watch_fatal(node.raft.clone()) => Some(reason),
    };
    match &failed {
        None => tracing::info!("shutting down"),
        Some(reason) => tracing::error!(%reason, "Raft stopped with a fatal error; shutting down"),
    }
    let _ = shutdown_tx.send(true);
    drain(client_server, "client").await;
    drain(peer_server, "peer").await;
    node.stop(&engine).await;
    drop(data_dir);
    match failed {
        None => Ok(()),
        Some(reason) => Err(anyhow::anyhow!("Raft stopped with a fatal error: {reason}")),
    }
}

/// Turns blob garbage collection on and off by the garbage in the blob files
/// ([`blob_gc`]) every [`blob_gc::STEER_INTERVAL`] until `shutdown`. On a blocking thread:
/// changing the cutoff takes RocksDB's database mutex.
async fn steer_blob_gc_periodically(engine: Arc<Engine>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(blob_gc::STEER_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let engine = engine.clone();
        match tokio::task::spawn_blocking(move || engine.steer_blob_gc()).await {
            Ok(Ok(_collecting)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "steering blob garbage collection"),
            Err(e) => tracing::warn!(error = %e, "the blob garbage collection look panicked"),
        }
    }
}

/// Transport security, loaded from the config's paths before anything else starts.
struct Transport {
    /// The client port's TLS; `None`: plain HTTP.
    client_port: Option<Arc<rustls::ServerConfig>>,
    peer_tls: Option<PeerTls>,
    server_proof: ServerProof,
    client_proof: ClientProof,
    /// TLS of relays to another node's client port (follower to leader).
    relay: Option<rustls::ClientConfig>,
    /// The client port certificate's notAfter, when a CA to check it against is known.
    client_cert_not_after: Option<u64>,
    /// The host of `client_addr` when the client port's certificate does not name it.
    client_cert_misses_addr: Option<String>,
}

impl Transport {
    fn load(config: &NodeConfig) -> anyhow::Result<Transport> {
        cairn_config::check_tls_files_open(config)?;
        let peer_tls = PeerTls::from_config(config)?;
        let secret = match &config.peer_secret_file {
            Some(path) => Some(PeerSecret::new(cairn_config::read_peer_secret(path)?)),
            None => None,
        };
        let server_proof = match (&peer_tls, &secret) {
            (Some(_), _) => ServerProof::Tls,
            (None, Some(secret)) => ServerProof::Secret(secret.clone()),
            (None, None) => ServerProof::Open,
        };
        Ok(Transport {
            client_port: tls_configs::client_port_server(config)?,
            peer_tls,
            server_proof,
            client_proof: ClientProof {
                own_id: config.id,
                secret,
            },
            relay: tls_configs::relay_client(config)?,
            client_cert_not_after: tls_configs::client_cert_not_after(config)?,
            client_cert_misses_addr: tls_configs::client_cert_misses_addr(config)?,
        })
    }

    /// The notAfter of each port's certificate, where known: (port, config key, unix s).
    fn certificate_ends(&self) -> [(&'static str, &'static str, Option<u64>); 2] {
        [
            ("client", "tls_cert", self.client_cert_not_after),
            (
                "peer",
                "peer_tls_cert",
                self.peer_tls.as_ref().and_then(|t| t.not_after),
            ),
        ]
    }

    /// The start-up warnings SPEC §8 asks for, at every start: ports exposed without TLS
    /// under `insecure`, and a peer port that accepts anyone. Logged under the target
    /// [`START_WARNINGS`], which no log filter turns off.
    fn announce(&self, config: &NodeConfig) {
        let exposed = config.exposed_without_tls();
        if !exposed.is_empty() {
            tracing::warn!(
                target: START_WARNINGS,
                ports = ?exposed,
                client = %config.client_addr,
                peer = %config.peer_addr,
                "--insecure: listening beyond loopback without TLS; anyone who can reach \
                 these ports can read the traffic and, on the peer port, act as a node"
            );
        }
        if config.client_scheme() == "https" && config.client_port_ca().is_none() {
            tracing::warn!(
                target: START_WARNINGS,
                "client-port TLS without a CA (--tls-ca, --peer-tls-ca or --tls-client-ca): \
                 this node cannot verify the leader's client port, so requests it must relay \
                 to the leader are answered 503 no_leader"
            );
        }
        if let Some(host) = &self.client_cert_misses_addr {
            tracing::warn!(
                target: START_WARNINGS,
                client = %config.client_addr,
                "the tls_cert certificate is not valid for {host}, the host of client_addr: \
                 other nodes relay to this one's client_addr when it leads and verify its \
                 certificate by that host, so their relays will fail; issue it for that host \
                 (cairn-node certs --nodes {id} --host {id}={host})",
                id = config.id
            );
        }
        let now = UnixTime::now();
        for (port, key, end) in self.certificate_ends() {
            if let Some(end) = end.filter(|end| validity::ends_soon(*end, now)) {
                let at = validity::rfc3339(UnixTime::since_unix_epoch(Duration::from_secs(end)));
                tracing::warn!(
                    target: START_WARNINGS,
                    port,
                    not_after = %at,
                    "the {key} certificate expires within 30 days: once it does, TLS \
                     clients and peers refuse this node; issue a new one and restart"
                );
            }
        }
        if config.peer_proof() == PeerProof::None {
            tracing::warn!(
                target: START_WARNINGS,
                peer = %config.peer_addr,
                "the peer port accepts unauthenticated peers (no peer TLS, no peer secret): \
                 local development only"
            );
        }
    }
}

/// The node's storage, opened: RocksDB, the Raft log and the state machine.
struct Storage {
    engine: Arc<Engine>,
    log: LogStore,
    state: StateEngine,
    sm: StateMachine,
}

impl Storage {
    fn open(config: &NodeConfig, data_dir: &DataDir) -> anyhow::Result<Storage> {
        let engine_options = EngineOptions {
            slot_cache_bytes: usize::try_from(config.slot_cache_mib << 20)
                .context("slot_cache_mib does not fit in this machine's address space")?,
            blob_min_bytes: config.blob_min_bytes,
            ..EngineOptions::default()
        };
        let engine =
            Engine::open(&data_dir.db_path(), &engine_options).context("opening RocksDB")?;
        let log = LogStore::new(
            LogEngine::open(engine.clone()).context("opening the Raft log")?,
            config.raft.max_payload_bytes,
        )
        .map_err(|e| anyhow::anyhow!("reading the Raft log: {e}"))?;
        let snapshots = SnapshotDir::open(data_dir.snapshot_path())?;
        let state = StateEngine::new(engine.clone());
        let sm =
            StateMachine::open(state.clone(), snapshots).context("opening the state machine")?;
        Ok(Storage {
            engine,
            log,
            state,
            sm,
        })
    }
}

/// What runs between start and stop: Raft, the read gate's token refresher, the snapshot
/// trigger by log bytes, and the handlers' shared [`App`].
struct Running {
    raft: Raft,
    app: Arc<App>,
    refresher: tokio::task::JoinHandle<()>,
    snapshotter: tokio::task::JoinHandle<()>,
}

/// Starts Raft on `storage`, then the read gate, the write batcher and the relay client.
async fn start(
    config: &NodeConfig,
    transport: &Transport,
    storage: Storage,
    data_dir: &DataDir,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Running> {
    let Storage {
        engine,
        log,
        state,
        sm,
    } = storage;
    let applied = sm.applied_watch();
    let access = sm.access();
    let applied_on_disk = *applied.borrow();
    let rpc_timeout = Duration::from_millis(config.raft.rpc_timeout_ms);
    let peer_ip = config.peer_socket_addr().context("peer_addr")?.ip();
    let peer = PeerClient::new(
        Some(peer_ip),
        rpc_timeout,
        transport.client_proof.clone(),
        transport.peer_tls.as_ref().map(|t| t.client.clone()),
    );
    // Before Raft starts, so that nothing it writes at startup counts as held state.
    let admission = Admission::open(
        data_dir.root(),
        holds_raft_state(&log, applied_on_disk).await?,
    )
    .context("reading the admission")?;
    let raft_config = Arc::new(openraft_config(&config.raft)?);
    let network = NetworkFactory::new(peer.clone());
    let raft = Raft::new(config.id, raft_config, network, log.clone(), sm)
        .await
        .context("starting Raft")?;
    peer.learn_membership(raft.metrics());
    // Applies bypass the WAL: after a crash openraft re-applies what the last flush missed
    // before `Raft::new` returns. Say how much, so a slow start explains itself.
    tracing::info!(
        applied_on_disk,
        applied = *applied.borrow(),
        "state machine ready (entries above the on-disk index were re-applied from the log)"
    );

    let reads = ReadGate::new(
        raft.clone(),
        peer.clone(),
        config.reads.clone(),
        rpc_timeout,
        applied,
    );
    let refresher = tokio::spawn(reads.clone().run_token_refresher(shutdown.clone()));
    tokio::spawn(follow_leadership(
        raft.clone(),
        reads.clone(),
        shutdown.clone(),
    ));
    let snapshot_trigger = SnapshotTrigger::default();
    let snapshotter = tokio::spawn(snapshot_trigger.clone().run(
        raft.clone(),
        log.clone(),
        config.raft.snapshot_log_bytes,
        shutdown.clone(),
    ));
    let batcher = Batcher::start(
        raft.clone(),
        config.batching.clone(),
        config.dedup_retention_ms,
    );
    let app = Arc::new(App {
        node_id: config.id,
        config: config.clone(),
        raft: raft.clone(),
        batcher,
        reads,
        view: StateView::new(state, log, engine, access),
        forwarder: relay_client(peer_ip, transport.relay.clone())?,
        peers: peer,
        admission: Arc::new(admission),
        metrics: Arc::new(Metrics::default()),
        snapshot_trigger,
        compacting: tokio::sync::Mutex::new(()),
        changing_membership: tokio::sync::Mutex::new(()),
        connections: ConnectionBound::new(config.limits.connections_max),
        watchers: Arc::new(tokio::sync::Semaphore::new(config.limits.watchers_max)),
        shutdown,
    });
    Ok(Running {
        raft,
        app,
        refresher,
        snapshotter,
    })
}

/// Logs each change of leader this node learns of (an election won here, another node
/// named leader, a leader lost), and tells the read gate when this node becomes leader
/// ([`ReadGate::elected`]: what its reads as a follower left behind is dropped). Wakes only when openraft's
/// server metrics change (the vote, the role, the leader, the membership), never per
/// entry; stops at shutdown or when Raft stops.
async fn follow_leadership(raft: Raft, reads: Arc<ReadGate>, mut shutdown: watch::Receiver<bool>) {
    let mut metrics = raft.server_metrics();
    // No leader is known at start: only a change from that is news.
    let mut known: Option<NodeId> = None;
    loop {
        let (me, leader, term) = {
            let m = metrics.borrow_and_update();
            (m.id, m.current_leader, m.vote.leader_id().get_term())
        };
        if leader != known {
            match leader {
                Some(id) if id == me => {
                    reads.elected();
                    tracing::info!(term, "this node is the leader");
                }
                Some(id) => tracing::info!(leader = id, term, "leader is node {id}"),
                None => tracing::info!(term, "no leader known (an election is under way)"),
            }
            known = leader;
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}

/// Whether the data dir holds Raft state: a vote cast, a log entry (or a purged one), or
/// an applied entry. A data dir without any is new or was wiped
/// ([`crate::raft_rpc::admission`]). Read before Raft starts, from the stores themselves.
async fn holds_raft_state(log: &LogStore, applied_on_disk: u64) -> anyhow::Result<bool> {
    let mut log = log.clone();
    let state = log.get_log_state().await.context("reading the log state")?;
    let vote = log.read_vote().await.context("reading the vote")?;
    let voted = vote.is_some_and(|v| v.leader_id.term > 0 || v.leader_id.voted_for().is_some());
    Ok(voted || state.last_log_id.is_some() || applied_on_disk > 0)
}

/// The client that relays a follower's requests to the leader. Relays leave from the
/// node's own peer IP too, so cutting a node off with packet filters also cuts its relays.
/// With client-port TLS it speaks HTTPS ([`tls_configs::relay_client`]); the URL's scheme
/// comes from [`NodeConfig::client_scheme`].
fn relay_client(
    peer_ip: std::net::IpAddr,
    tls: Option<rustls::ClientConfig>,
) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .local_address(peer_ip)
        .no_proxy()
        .pool_idle_timeout(RELAY_IDLE_TIMEOUT);
    if let Some(tls) = tls {
        builder = builder.use_preconfigured_tls(tls);
    }
    Ok(builder.build()?)
}

impl Running {
    /// Stops what [`start`] started, after the servers have drained, and flushes the state.
    async fn stop(self, engine: &Engine) {
        let Running {
            raft,
            app,
            refresher,
            snapshotter,
        } = self;
        let _ = refresher.await;
        let _ = snapshotter.await;
        drop(app);
        if let Err(e) = raft.shutdown().await {
            tracing::warn!(error = %e, "stopping Raft");
        }
        // Applies bypass the WAL: flushing them now leaves nothing to re-apply at the next
        // start.
        if let Err(e) = engine.flush_state() {
            tracing::warn!(error = %e, "flushing the state machine at shutdown");
        }
        tracing::info!("stopped");
    }
}

/// Resolves with the reason once openraft reports its core stopped on a fatal error.
///
/// Polled every [`FATAL_POLL`] rather than woken by every metrics change: the metrics
/// change several times per log entry, and each change woke this future's thread (the
/// main thread, parked in `block_on`) — 3 to 5 context switches per entry on every node,
/// measured from `/proc/<pid>/task/*/status` at one writer.
async fn watch_fatal(raft: Raft) -> String {
    let metrics = raft.metrics();
    let mut tick = tokio::time::interval(FATAL_POLL);
    loop {
        tick.tick().await;
        // The last value stays readable after the channel closes: the reason comes first.
        if let Err(e) = &metrics.borrow().running_state {
            return e.to_string();
        }
        // The metrics channel closes only when Raft is gone: that is fatal too.
        if metrics.has_changed().is_err() {
            return "Raft metrics channel closed".to_string();
        }
    }
}

/// `addr` as configured, followed by the socket address it bound when that reads
/// otherwise (`localhost:7401 (127.0.0.1:7401)`): a name binds the first address the
/// resolver gives, which the log should show.
fn bound_address(addr: &str, listener: &TcpListener) -> String {
    match listener.local_addr() {
        Ok(bound) if bound.to_string() != addr => format!("{addr} ({bound})"),
        _ => addr.to_string(),
    }
}

async fn bind(addr: &str, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} address {addr}"))
}

async fn drain(server: tokio::task::JoinHandle<()>, what: &str) {
    if tokio::time::timeout(DRAIN_TIMEOUT, server).await.is_err() {
        tracing::warn!(
            server = what,
            "connections still open after {} s; closing",
            DRAIN_TIMEOUT.as_secs()
        );
    }
}
