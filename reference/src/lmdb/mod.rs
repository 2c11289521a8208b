//! The LMDB binding (spec text 000, DIGEST §§1-4): one file, one unnamed
//! database, keys `meta`, `index`, `ff`, `r`/`s`/`f` + u64 big-endian.

mod digest;
mod layout;
mod pages;
mod reader;
mod resolve;
pub mod set;
mod writer;

pub use digest::{digest_of, file_digest, is_digest, DIGEST_FIELD, DIGEST_HEX_LEN};
pub use pages::{check_pages, PageCounts};
pub use reader::{FrameBlock, FrameColumn, Reader, RecordTxn, ResolvedFrame, ResolvedView};
pub use set::{Manifest, Set, SetFrame, SetOptions, SetTxn, ShardInfo};
pub use writer::{
    located_io, partial_path, write_collection, Writer, WriterOptions, Written, DEFAULT_PAGE_SIZE,
};

use crate::clause::Clause;
use crate::error::{Error, Result};
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// `layout` tag of the `meta` value.
pub const LAYOUT: &str = "mrec-lmdb";
/// Newest `layout_version` this implementation reads and the one it writes.
pub const LAYOUT_VERSION: i64 = 1;
/// Key of the collection's `meta` value.
pub const META_KEY: &[u8] = b"meta";
/// Key of the index frame.
pub const INDEX_KEY: &[u8] = b"index";
/// Key of the force-field frame.
pub const FF_KEY: &[u8] = b"ff";

/// Key `prefix` + u64 big-endian.
pub fn numbered_key(prefix: u8, n: u64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = prefix;
    key[1..].copy_from_slice(&n.to_be_bytes());
    key
}

/// The prefix and number of a numbered key (`r`, `s` or `f` + u64
/// big-endian), when `key` is one; [`numbered_key`] read back.
pub fn parse_numbered_key(key: &[u8]) -> Option<(u8, u64)> {
    let (&prefix, n) = key.split_first()?;
    let n: [u8; 8] = n.try_into().ok()?;
    b"rsf"
        .contains(&prefix)
        .then_some((prefix, u64::from_be_bytes(n)))
}

/// Key of record r's meta document.
pub fn record_key(r: u64) -> [u8; 9] {
    numbered_key(b'r', r)
}
/// Key of record r's system frame.
pub fn system_key(r: u64) -> [u8; 9] {
    numbered_key(b's', r)
}
/// Key of global frame ordinal j.
pub fn frame_key(j: u64) -> [u8; 9] {
    numbered_key(b'f', j)
}

/// The binding's one database: byte keys to byte values.
pub type Db = Database<Bytes, Bytes>;

pub(crate) fn lmdb_error(e: heed::Error) -> Error {
    match e {
        heed::Error::Io(io) => Error::Io(io),
        other => Error::Lmdb(other.to_string()),
    }
}

/// `path` with `suffix` appended to its file name.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// LMDB's lock file beside a `NO_SUB_DIR` environment.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    suffixed(path, "-lock")
}

/// Deletes a `NO_SUB_DIR` environment's file and its lock file, where
/// they exist (errors are ignored: what is left is what could not go).
pub fn remove_with_lock_file(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(lock_path(path));
}

/// What `statvfs` says of the file system holding `path`.
#[cfg(target_os = "linux")]
fn file_system_of(path: &Path) -> Option<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct,
    // which statvfs fills in.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a writable
    // statvfs, both living across the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat)
}

/// The bytes an unprivileged process may still write on `dir`'s file
/// system (`statvfs`), or `None` where that is not known (other systems).
#[cfg(target_os = "linux")]
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = file_system_of(dir)?;
    // The two fields are 32-bit on some targets.
    #[allow(clippy::useless_conversion)]
    let (blocks, block_size) = (u64::from(stat.f_bavail), u64::from(stat.f_frsize));
    Some(blocks.saturating_mul(block_size))
}

/// The bytes an unprivileged process may still write on `dir`'s file
/// system: not known on this system.
#[cfg(not(target_os = "linux"))]
pub fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

/// Whether `path` is on a file system mounted read-only: there LMDB opens
/// a read-only environment without its lock file (it cannot open one).
#[cfg(target_os = "linux")]
fn on_read_only_file_system(path: &Path) -> bool {
    file_system_of(path).is_some_and(|stat| stat.f_flag & libc::ST_RDONLY != 0)
}

/// Without `statvfs`: whether LMDB left no lock file beside `path`.
#[cfg(not(target_os = "linux"))]
fn on_read_only_file_system(path: &Path) -> bool {
    !lock_path(path).exists()
}

/// A read environment of one file, shared by every [`Reader`] of that
/// file in this process.
///
/// LMDB must not open one file twice in a process (its locks belong to the
/// process: closing one handle would release the other's), and heed
/// refuses a second open of a path. A loader opens a collection wherever it
/// needs one (a dataset object per split, a validator beside the loader),
/// so a second [`Reader::open`] of a file this process reads shares the
/// environment already open. The registry is keyed by the file (device and
/// inode), so a hard link shares it too.
pub(crate) struct SharedEnv {
    /// Dropped by hand in `Drop`, while the registry is locked.
    env: ManuallyDrop<Env<WithoutTls>>,
    no_lock: bool,
    /// The file (device and inode) it maps.
    file: FileId,
}

/// One file's open environment and how many [`SharedEnv`]s use it.
struct OpenFile {
    file: FileId,
    /// The path it was first opened by, canonical.
    path: PathBuf,
    env: Env<WithoutTls>,
    no_lock: bool,
    users: usize,
}

/// The file a path names: device and inode.
pub(crate) type FileId = (u64, u64);

/// Every file this process has open for reading. Opens and the last
/// handle's close happen while it is locked, so an open never meets an
/// environment that heed is still closing.
static OPEN_FILES: Mutex<Vec<OpenFile>> = Mutex::new(Vec::new());

fn open_files() -> MutexGuard<'static, Vec<OpenFile>> {
    // The registry stays consistent between statements: a panic elsewhere
    // while it was held leaves nothing half-done.
    OPEN_FILES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn file_id(path: &Path) -> Result<(FileId, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|e| Error::io_at(path, e))?;
    Ok(((m.dev(), m.ino()), m.len()))
}

impl SharedEnv {
    /// The environment, for read transactions.
    pub(crate) fn env(&self) -> &Env<WithoutTls> {
        &self.env
    }

    /// Whether the environment was opened without LMDB's lock file.
    pub(crate) fn no_lock(&self) -> bool {
        self.no_lock
    }

    /// The file (device and inode) the environment maps.
    pub(crate) fn file(&self) -> FileId {
        self.file
    }
}

impl Drop for SharedEnv {
    fn drop(&mut self) {
        let mut open = open_files();
        // SAFETY: `self.env` is taken once, here, and never used after.
        let env = unsafe { ManuallyDrop::take(&mut self.env) };
        let ours = open.iter().position(|o| o.env.path() == env.path());
        if let Some(i) = ours {
            open[i].users -= 1;
            if open[i].users == 0 {
                open.swap_remove(i);
            }
        }
        // The last clone closes the environment here, under the lock.
        drop(env);
    }
}

/// Opens an environment for reading, or shares the one this process has
/// open on the same file. When the lock file cannot be created (read-only
/// directory or medium), falls back to `NO_LOCK`: safe only while no
/// process writes the file, which holds for a committed collection, since
/// writers only create new files (see ARCHITECTURE.md, "Opening").
pub(crate) fn open_read_env(path: &Path) -> Result<SharedEnv> {
    if !path.is_file() {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is not a file", path.display()),
        )));
    }
    let mut open = open_files();
    // A writer may install another file at `path` between the look at the
    // file and LMDB's open of it: the open is kept only when the file is
    // the same before and after.
    for _ in 0..3 {
        let (file, size) = file_id(path)?;
        if let Some(shared) = open.iter_mut().find(|o| o.file == file) {
            shared.users += 1;
            return Ok(SharedEnv {
                env: ManuallyDrop::new(shared.env.clone()),
                no_lock: shared.no_lock,
                file,
            });
        }
        let (env, no_lock) = open_new_env(path, size, &open)?;
        if file_id(path)?.0 != file {
            continue;
        }
        open.push(OpenFile {
            file,
            path: env.path().to_path_buf(),
            env: env.clone(),
            no_lock,
            users: 1,
        });
        return Ok(SharedEnv {
            env: ManuallyDrop::new(env),
            no_lock,
            file,
        });
    }
    Err(Error::Io(std::io::Error::new(
        std::io::ErrorKind::ResourceBusy,
        format!(
            "{}: replaced by another file during each of 3 opens",
            path.display()
        ),
    )))
}

/// Why heed refused to open `path` a second time in this process.
fn already_open(path: &Path, open: &[OpenFile]) -> Error {
    let canonical = std::fs::canonicalize(path).ok();
    let why = if open.iter().any(|o| Some(&o.path) == canonical.as_ref()) {
        "a Reader of the collection this file replaced is still open in this process, \
         and LMDB opens one file per path in a process: drop it first"
    } else {
        "already open in this process, but not by a Reader (by a Writer, or by \
         heed used directly), and LMDB opens one file per path in a process"
    };
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::ResourceBusy,
        format!("{}: {why}", path.display()),
    ))
}

/// LMDB's open of a file of `size` bytes that none of `registered` is,
/// with the checks of a whole file.
fn open_new_env(
    path: &Path,
    size: u64,
    registered: &[OpenFile],
) -> Result<(Env<WithoutTls>, bool)> {
    let map = map_size_for(size);
    let open = |flags: EnvFlags| {
        let mut options = EnvOpenOptions::new().read_txn_without_tls();
        options.map_size(map).max_readers(MAX_READERS).max_dbs(0);
        // SAFETY: the flags are a valid combination for a read-only open.
        unsafe { options.flags(flags) };
        // SAFETY: the map is only read through transactions of this Env;
        // this process opens a file once (`OPEN_FILES`) and heed refuses a
        // second open of a path, and our writers never modify a committed
        // file (they create new ones).
        unsafe { options.open(path) }
    };
    if size == 0 {
        // A writer that died before LMDB wrote its first page.
        return Err(Error::Uncommitted);
    }
    let (env, no_lock) = match open(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) {
        Ok(env) => (env, false),
        Err(heed::Error::EnvAlreadyOpened) => return Err(already_open(path, registered)),
        Err(heed::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) || e.raw_os_error() == Some(30) =>
        {
            let env = open(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY | EnvFlags::NO_LOCK)
                .map_err(not_an_environment)?;
            (env, true)
        }
        Err(e) => return Err(not_an_environment(e)),
    };
    // LMDB maps the file and trusts its own page numbers: reading a page past
    // the end of a truncated copy would fault (SIGBUS). Refuse such a file.
    // The size is read again after the page count: a writer still committing
    // grows the file (data pages before its meta page), so only a size taken
    // after the page count is comparable with it.
    let needed =
        (env.info().last_page_number as u64 + 1).saturating_mul(env.stat().page_size as u64);
    let size = std::fs::metadata(path)?.len();
    if size < needed {
        return Err(Error::refused(
            Clause::FileComplete,
            "",
            format!("the file has {size} bytes but its LMDB pages need {needed}: a truncated copy"),
        ));
    }
    // On a read-only file system LMDB itself goes without the lock file.
    // (Asked of the file system: a look for the lock file would miss it
    // when an overwrite deletes the path's lock file just after the open.)
    let no_lock = no_lock || on_read_only_file_system(path);
    Ok((env, no_lock))
}

/// An open that failed on the file's content (not on permissions) means the
/// file is not a whole LMDB environment.
fn not_an_environment(e: heed::Error) -> Error {
    match e {
        heed::Error::Mdb(m) => Error::refused(
            Clause::FileComplete,
            "",
            format!("not a whole LMDB environment: {m}"),
        ),
        heed::Error::Io(io) if io.raw_os_error() == Some(22) || io.raw_os_error() == Some(9) => {
            Error::refused(
                Clause::FileComplete,
                "",
                format!("not a whole LMDB environment: {io}"),
            )
        }
        other => lmdb_error(other),
    }
}

/// Drops this process's page-table entries of a file's read-only shared
/// mappings (LMDB's map of a collection: Linux `madvise(MADV_DONTNEED)`
/// over the ranges `/proc/self/maps` gives for the file's device and
/// inode), so that the pages a reader or writer went through stop counting
/// in its resident memory. The page cache keeps them; the next access maps
/// the same bytes again. Best effort: an error is ignored; on other
/// systems nothing is done.
pub(crate) fn release_file_pages((dev, ino): FileId) {
    #[cfg(target_os = "linux")]
    {
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        let device = (libc::major(dev), libc::minor(dev));
        for (start, end) in file_mappings(&maps, device, ino) {
            // SAFETY: the range is a shared, read-only mapping of a
            // committed collection file (LMDB's map: every open of the
            // file in this process shares it). On a shared file mapping,
            // MADV_DONTNEED only drops this process's page-table entries:
            // the next access maps the page cache's page again, with the
            // same bytes (a committed file is never modified in place), so
            // every pointer into the range, a live read transaction's too,
            // stays valid and reads what it read before.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (dev, ino);
}

/// The address ranges of `/proc/self/maps` lines (`start-end perms offset
/// major:minor inode path`, numbers of the range and device in hex) that
/// map inode `ino` of `device` shared and read-only (`r--s`).
#[cfg(target_os = "linux")]
pub(crate) fn file_mappings(
    maps: &str,
    device: (u32, u32),
    ino: u64,
) -> impl Iterator<Item = (usize, usize)> + '_ {
    let hex = |s: &str| usize::from_str_radix(s, 16).ok();
    maps.lines().filter_map(move |line| {
        let mut fields = line.split_ascii_whitespace();
        let (range, perms) = (fields.next()?, fields.next()?);
        // The offset, then the device.
        let dev = fields.nth(1)?;
        let inode: u64 = fields.next()?.parse().ok()?;
        let (major, minor) = dev.split_once(':')?;
        let on_device = (hex(major)?, hex(minor)?) == (device.0 as usize, device.1 as usize);
        let (start, end) = range.split_once('-')?;
        let (start, end) = (hex(start)?, hex(end)?);
        (on_device && inode == ino && perms == "r--s" && end > start).then_some((start, end))
    })
}

/// Reader slots of an environment: how many read transactions may be open
/// at once across all processes that share the lock file.
pub const MAX_READERS: u32 = 1024;

/// A map size for a file of `size` bytes: at least the file, rounded to 1 MiB.
pub(crate) fn map_size_for(size: u64) -> usize {
    let mib = 1u64 << 20;
    (size.saturating_add(mib).div_ceil(mib) * mib).max(16 * mib) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbered keys read back to their prefix and number; anything else,
    /// `ff` and the other names included, is not one.
    #[test]
    fn numbered_keys_read_back() {
        for (prefix, n) in [(b'r', 0), (b's', 7), (b'f', u64::MAX)] {
            assert_eq!(
                parse_numbered_key(&numbered_key(prefix, n)),
                Some((prefix, n))
            );
        }
        let mut long = frame_key(1).to_vec();
        long.push(0);
        for other in [
            &b"ff"[..],
            b"meta",
            b"index",
            b"",
            &long,
            &numbered_key(b'x', 1),
        ] {
            assert_eq!(parse_numbered_key(other), None, "{other:?}");
        }
        assert_eq!(parse_numbered_key(&frame_key(1)[..8]), None);
    }
}
