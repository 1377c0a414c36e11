//! Opening fjall, and creating a new store in place.
//!
//! A new store is created in its own directory and stays open: it is never closed
//! and reopened before use. That matters for speed. fjall creates a journal at its
//! full length (zeros after the data), so an append rewrites bytes inside the file
//! and its fdatasync only writes data. A reopened journal is cut to its content and
//! appended to, so every fdatasync also commits the file's new size to the file
//! system's own journal: measured here, one insert + fdatasync took ~1.5x as long
//! on a reopened fjall database as on a new one (fjall 3.1.13, ext4; `cargo bench
//! --bench reel`, scenario "sequential"), until fjall's journal rotates after 64 MB.
//!
//! Creation stays all-or-nothing without the reopen: a marker file is made (and
//! made durable) before anything else and removed after the format marker is
//! durable. A directory that still holds the marker is what a process killed while
//! creating left behind; nothing in it was ever used, and it is created anew.

use std::fs::File;
use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{FORMAT_VERSION, Keyspaces, index};
use crate::StorageError;
use crate::store::Result;

/// Present in a store's directory while its creation has not finished.
const CREATING: &str = "reel-creating";

/// Opens the store in `path`, creating it if the directory is missing or empty (or
/// holds a creation that never finished).
pub(super) fn open_or_create(
    path: &Path,
    options: &super::StoreOptions,
) -> Result<(Database, Keyspaces, Keyspace)> {
    drop_old_staging(path)?;
    if is_missing_or_empty(path)? || path.join(CREATING).exists() {
        create_in_place(path, options)
    } else {
        open_keyspaces(path, options)
    }
}

/// Opens the database and every keyspace (creating what is missing).
fn open_keyspaces(
    path: &Path,
    options: &super::StoreOptions,
) -> Result<(Database, Keyspaces, Keyspace)> {
    let db = Database::builder(path)
        .max_journaling_size(options.max_journal_bytes)
        .cache_size(options.cache_bytes)
        .open()
        .map_err(|e| match e {
            fjall::Error::Locked => StorageError::Locked {
                path: path.to_path_buf(),
            },
            e => e.into(),
        })?;
    // Small memtables: flushed sooner, so idle runs cost disk, not memory
    // (invariant 6). The log's is larger: it takes most writes, and with 8 MiB
    // its flushes and their compactions cost busy hosts ~13% of their CPU.
    let sized = |name: &str, memtable: u64| {
        db.keyspace(name, || {
            KeyspaceCreateOptions::default().max_memtable_size(memtable)
        })
    };
    let ks = |name: &str| sized(name, options.max_memtable_bytes);
    let keyspaces = Keyspaces {
        log: sized("log", options.max_log_memtable_bytes)?,
        runs: ks("runs")?,
        active: ks("active")?,
        timers: ks("timers")?,
        listing: ks("listing")?,
        schedules: ks("schedules")?,
        db: db.clone(),
    };
    let format = ks("reel")?;
    Ok((db, keyspaces, format))
}

/// Whether `path` holds a store: fjall's version marker (its `VERSION_MARKER`,
/// by which fjall itself tells a database to recover from a new one) is there.
pub(super) fn holds_store(path: &Path) -> bool {
    path.join("version").is_file()
}

fn is_missing_or_empty(path: &Path) -> Result<bool> {
    match std::fs::read_dir(path) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(StorageError::Io(format!("{}: {e}", path.display()))),
    }
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> StorageError + '_ {
    move |e| StorageError::Io(format!("creating {}: {e}", path.display()))
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The parent directory of `path` (`.` for a bare name).
fn parent_of(path: &Path) -> std::path::PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    }
}

/// Removes the staging directory (`.<name>.creating` beside the store) in which
/// earlier builds of reel created a new store before renaming it into place; one is
/// left only by a process killed while creating, and was never used.
fn drop_old_staging(path: &Path) -> Result<()> {
    let Some(name) = path.file_name() else {
        return Ok(());
    };
    let staging = parent_of(path).join(format!(".{}.creating", name.to_string_lossy()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io_error(path))?;
    }
    Ok(())
}

/// Creates the store in `path` and returns it open (see the module doc).
fn create_in_place(
    path: &Path,
    options: &super::StoreOptions,
) -> Result<(Database, Keyspaces, Keyspace)> {
    let io = io_error(path);
    let marker = path.join(CREATING);
    if marker.exists() {
        // Left by a process killed while creating: never used, safe to drop. Its
        // contents go, not the directory (which may be a mount point).
        tracing::info!(path = %path.display(), "reel: dropping a store whose creation never finished");
        for entry in std::fs::read_dir(path).map_err(&io)? {
            let entry = entry.map_err(&io)?;
            let removed = if entry.file_type().map_err(&io)?.is_dir() {
                std::fs::remove_dir_all(entry.path())
            } else {
                std::fs::remove_file(entry.path())
            };
            removed.map_err(&io)?;
        }
    }
    std::fs::create_dir_all(path).map_err(&io)?;
    File::create(&marker)
        .and_then(|f| f.sync_all())
        .and_then(|()| sync_dir(path))
        .and_then(|()| sync_dir(&parent_of(path)))
        .map_err(&io)?;
    let (db, keyspaces, format) = open_keyspaces(path, options)?;
    format.insert("format", FORMAT_VERSION)?;
    format.insert(index::MARKER, "1")?;
    db.persist(PersistMode::SyncAll)?;
    std::fs::remove_file(&marker)
        .and_then(|()| sync_dir(path))
        .map_err(&io)?;
    Ok((db, keyspaces, format))
}
