//! openraft's storage conformance suite against cairn's RocksDB log store and state machine.
//!
//! Every suite case gets a fresh data directory: the builder opens RocksDB and the snapshot
//! directory under a new `TempDir` and hands the guard back as `G`, so the directory lives
//! exactly as long as the case.

use cairn_node::consensus::log_store::LogStore;
use cairn_node::consensus::state_machine::StateMachine;
use cairn_node::consensus::{StorageError, StorageIOError, TypeConfig};
use cairn_node::store::{Engine, EngineOptions, LogEngine, SnapshotDir, StateEngine};
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

/// Small RocksDB buffers: the suite opens dozens of instances one after the other.
fn small_options() -> EngineOptions {
    EngineOptions {
        block_cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        background_jobs: 1,
        slot_cache_bytes: 1 << 20,
        ..Default::default()
    }
}

struct Builder;

fn open_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_state_machine(openraft::AnyError::new(&e)).into()
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().map_err(open_err)?;
        let engine = Engine::open(&dir.path().join("db"), &small_options()).map_err(open_err)?;
        let log = LogStore::new(LogEngine::open(engine.clone()).map_err(open_err)?, u64::MAX)?;
        let snapshots = SnapshotDir::open(dir.path().join("snapshots")).map_err(open_err)?;
        let sm = StateMachine::open(StateEngine::new(engine), snapshots).map_err(open_err)?;
        Ok((dir, log, sm))
    }
}

/// A plain `#[test]`: the suite builds its own tokio runtime per case and blocks on it.
#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).expect("openraft storage suite");
}
