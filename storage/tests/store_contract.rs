//! The backend contract of `reel_storage::validation`, on the fjall backend and on
//! `MemStore` (the PostgreSQL backend runs the same checks in its own crate).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel_storage::validation::{self, Backend, Damage};
use reel_storage::{FjallStore, MemStore, Store};
use tempfile::TempDir;

/// A fjall store in its own temporary directory.
struct Fjall {
    dir: TempDir,
}

impl Fjall {
    fn new() -> Fjall {
        Fjall {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("store")
    }
}

impl Backend for Fjall {
    async fn open(&self) -> Arc<dyn Store> {
        FjallStore::open(self.path()).expect("open fjall store")
    }

    async fn damage(&self, damage: Damage) -> bool {
        let db = Database::builder(self.path()).open().expect("raw open");
        let ks = |name: &str| {
            db.keyspace(name, KeyspaceCreateOptions::default)
                .expect("keyspace")
        };
        let garbage = [0xc1u8];
        match damage {
            Damage::LogRecord { run_id, seq } => {
                let mut key = run_id.into_bytes();
                key.push(0);
                key.extend_from_slice(&seq.to_be_bytes());
                ks("log").insert(key, garbage).expect("insert");
            }
            Damage::Meta { run_id } => {
                ks("runs").insert(&run_id, garbage).expect("insert");
                ks("active").insert(&run_id, garbage).expect("insert");
            }
            Damage::TimerKey => ks("timers").insert([0u8, 1], []).expect("insert"),
        }
        db.persist(PersistMode::SyncAll).expect("persist");
        true
    }
}

/// A `MemStore`: nothing survives a close, nothing can be damaged.
#[derive(Default)]
struct Mem {
    store: Mutex<Option<Arc<MemStore>>>,
}

impl Backend for Mem {
    async fn open(&self) -> Arc<dyn Store> {
        let mut store = self.store.lock().expect("lock");
        store
            .get_or_insert_with(|| Arc::new(MemStore::new()))
            .clone()
    }

    fn persistent(&self) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fjall_store_meets_the_backend_contract() {
    validation::run_all(Fjall::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_store_meets_the_backend_contract() {
    validation::run_all(Mem::default).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fjall_store_tells_a_listener_that_begins_during_a_commit() {
    validation::a_listener_that_begins_during_a_commit_hears_of_it(&Fjall::new()).await;
}
