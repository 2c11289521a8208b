//! Where a collection is written and how it appears: `<path>.partial`
//! claimed under an exclusive `flock`, its empty environment written with
//! the chosen page size, and the rename (or hard link) to the path once
//! `meta` is committed.

use super::*;

/// The file a writer builds the collection for `path` in: `path` with
/// `.partial` appended, in the same directory. [`Writer::finish`] renames
/// it to `path` once the collection is committed, so `path` never holds a
/// part of one: a reader sees no file, the complete collection, or (with
/// `overwrite`) the file it replaces, whole, until the rename. A writer
/// dropped before `finish` deletes it; one killed leaves it behind,
/// uncommitted, and the next writer of `path` starts it again. An
/// overwrite needs room for both files until the rename.
pub fn partial_path(path: &Path) -> PathBuf {
    crate::lmdb::suffixed(path, ".partial")
}

/// Where a writer puts its collection: `path`, by way of its
/// [`partial_path`], which is deleted (with its lock file) when the writer
/// is dropped before the collection in it is complete.
pub(super) struct Output {
    pub(super) path: PathBuf,
    pub(super) overwrite: bool,
    /// Hash the finished file ([`WriterOptions::digest`]).
    pub(super) digest: bool,
    pub(super) complete: bool,
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.complete {
            crate::lmdb::remove_with_lock_file(&partial_path(&self.path));
        }
    }
}

/// Moves the committed collection in `partial` to `path`. With `overwrite`,
/// a rename: readers that have the replaced file open keep reading it,
/// whole (writing it in place would cut the pages they map from under
/// them, a SIGBUS). Without, a hard link, which fails rather than replace
/// a file created at `path` meanwhile (a rename where the file system has
/// no hard links). Best effort last: the directory is synced, so the new
/// name survives a power cut as the file's content does.
pub(super) fn install(output: &Output) -> Result<()> {
    let (path, partial) = (&output.path, &partial_path(&output.path));
    let _ = std::fs::remove_file(lock_path(partial));
    // Whatever keeps the collection from its path, it stays in `partial`.
    // (`finish` names the path.)
    let not_placed = |kind, why: String| {
        let where_ = format!("{why}; the collection is complete in {}", partial.display());
        Error::Io(std::io::Error::new(kind, where_))
    };
    let occupied = || {
        not_placed(
            std::io::ErrorKind::AlreadyExists,
            "another program created this file during the write".into(),
        )
    };
    let rename = || std::fs::rename(partial, path).map_err(|e| not_placed(e.kind(), e.to_string()));
    if output.overwrite {
        rename()?;
    } else {
        match std::fs::hard_link(partial, path) {
            // Only the second name goes: the collection is at the path.
            Ok(()) => {
                let _ = std::fs::remove_file(partial);
            }
            // An empty file is not a collection: `create` takes it as free.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
                    return Err(occupied());
                }
                rename()?;
            }
            Err(_) if path.exists() => return Err(occupied()),
            Err(_) => rename()?,
        }
    }
    // LMDB's readers take the current transaction from the lock file and
    // pick their meta page by its parity. A lock file left by readers of a
    // replaced file holds an id of that file; both meta pages lead to the
    // whole collection (`finish_file`), and without that lock file new
    // readers start one of their own. Readers of the replaced file keep
    // theirs open.
    let _ = std::fs::remove_file(lock_path(path));
    if let Ok(dir) = File::open(directory_of(path)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Writes the two meta pages of an empty LMDB environment (LMDB's data
/// format 1, as `mdb_env_init_meta` writes them) with page size `page_size`
/// and map size `map_size` into the empty `file`: a main database and a
/// free-page database without pages, no transaction committed yet.
pub(super) fn write_empty_environment(file: &File, page_size: u32, map_size: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    const P_META: u16 = 0x08;
    const MDB_MAGIC: u32 = 0xBEEF_C0DE;
    const MDB_DATA_VERSION: u32 = 1;
    /// `MDB_NOSUBDIR` (this writer's only persistent environment flag)
    /// and `MDB_INTEGERKEY`, the free-page database's own flag.
    const FREE_DB_FLAGS: u16 = 0x4000 | 0x08;
    const NO_PAGE: u64 = u64::MAX;
    let size = page_size as usize;
    let mut pages = vec![0u8; 2 * size];
    for (pgno, page) in pages.chunks_exact_mut(size).enumerate() {
        let mut at = 0usize;
        let mut put = |bytes: &[u8]| {
            page[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        // MDB_page header: pgno, pad, flags, lower, upper.
        put(&(pgno as u64).to_le_bytes());
        put(&0u16.to_le_bytes());
        put(&P_META.to_le_bytes());
        put(&[0; 4]);
        // MDB_meta: magic, version, fixed-map address, map size.
        put(&MDB_MAGIC.to_le_bytes());
        put(&MDB_DATA_VERSION.to_le_bytes());
        put(&0u64.to_le_bytes());
        put(&map_size.to_le_bytes());
        // Two MDB_db: pad (the page size, for the free-page database),
        // flags, depth, branch, leaf and overflow pages, entries, root.
        for (pad, flags) in [(page_size, FREE_DB_FLAGS), (0, 0)] {
            put(&pad.to_le_bytes());
            put(&flags.to_le_bytes());
            put(&0u16.to_le_bytes());
            put(&[0; 32]);
            put(&NO_PAGE.to_le_bytes());
        }
        // Last page used (the second meta page), last transaction id.
        put(&1u64.to_le_bytes());
        put(&0u64.to_le_bytes());
    }
    file.write_all_at(&pages, 0)?;
    Ok(())
}

/// Refuses a `path` a collection cannot be put at: one that is not a file,
/// or without `overwrite` a file that is not empty.
pub(super) fn check_target(path: &Path, overwrite: bool) -> Result<()> {
    let refuse = |kind, why: &str| Err(Error::io_at(path, std::io::Error::new(kind, why)));
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => refuse(std::io::ErrorKind::AlreadyExists, "not a file"),
        Ok(m) if m.len() > 0 && !overwrite => refuse(
            std::io::ErrorKind::AlreadyExists,
            "exists (pass overwrite to replace it)",
        ),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io_at(path, e)),
        _ => Ok(()),
    }
}

/// Takes the writer's exclusive lock on `partial` (creating it) and
/// empties it: what a killed writer left there is never a collection.
/// Busy while another writer of `target` holds it.
pub(super) fn claim(partial: &Path, target: &Path) -> Result<File> {
    use std::os::unix::fs::MetadataExt;
    let busy = || {
        Error::Busy(format!(
            "{} is being written by another writer",
            target.display()
        ))
    };
    // A writer finishing meanwhile renames the file this one opened and
    // then releases it: the lock taken is then on its collection, not on
    // the partial path, and the path is opened again.
    for _ in 0..3 {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(partial)
            .map_err(|e| Error::io_at(target, e))?;
        if file.try_lock().is_err() {
            return Err(busy());
        }
        let held = file.metadata().map_err(|e| Error::io_at(target, e))?;
        let named = std::fs::metadata(partial);
        if !named.is_ok_and(|n| (n.dev(), n.ino()) == (held.dev(), held.ino())) {
            continue;
        }
        // A file with another name (a collection whose partial name was
        // left after its hard link) is not emptied: the name goes instead.
        if held.nlink() > 1 {
            std::fs::remove_file(partial).map_err(|e| Error::io_at(target, e))?;
            continue;
        }
        file.set_len(0).map_err(|e| Error::io_at(target, e))?;
        let _ = std::fs::remove_file(lock_path(partial));
        return Ok(file);
    }
    Err(busy())
}

/// `e`, naming `path` if it is an operating-system error (which, unlike a
/// refusal, says nothing of where it happened), and the free space of its
/// file system when little is left (under 64 MiB): LMDB reports a write
/// cut short by a full disk as EIO, "Input/output error", not as ENOSPC.
pub fn located_io(path: &Path, e: Error) -> Error {
    let Error::Io(io) = e else {
        return e;
    };
    match crate::lmdb::free_bytes(directory_of(path)).filter(|&free| free < 64 << 20) {
        Some(free) => Error::io_at(
            path,
            std::io::Error::new(
                io.kind(),
                format!("{io}; its file system has {free} bytes free"),
            ),
        ),
        None => Error::io_at(path, io),
    }
}

/// The directory holding `path` (`.` for a bare file name).
pub(super) fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}
