//! A check of an LMDB file's page structure, in our own code, before LMDB
//! walks it. LMDB trusts its pages: a flipped byte in a node array or a
//! branch pointer makes its cursor code read through a bad pointer and
//! crash the process (issue #31). This maps the file read-only and checks
//! what a reader's walk of the main database would rely on:
//!
//! - both meta pages: LMDB's magic and data version, one page size (a
//!   power of two, 512 to 65536 bytes), the newer of the two (by `txnid`,
//!   as LMDB picks it) naming the main database;
//! - the main database's flags: no duplicate sort (this binding uses none);
//! - every page reachable from its root: inside the file, its header's page
//!   number its own, a branch or a leaf (an overflow page only as a value's
//!   run), `lower`/`upper` inside the page and ordered, every node pointer
//!   inside `upper..page end`, every node (header, key, inline value)
//!   inside the page, keys at most 511 bytes and in order within a page,
//!   no node flagged as a sub-database or duplicate data, every leaf at the
//!   tree's recorded depth, no page reached twice;
//! - each value on overflow pages: its run inside the file, headed by an
//!   overflow page of its own number, long enough for the value, sharing
//!   no page with another run or the tree;
//! - the page and entry counts of the database record.
//!
//! Work is one visit of every page of the tree, touching its header, node
//! pointers and node headers and keys (not the values), and one header per
//! overflow run; memory is one bit per page of the file and the walk's
//! stack (one entry per child pointer of the pages visited). No allocation
//! is sized by a number read from the file before that number is checked
//! against the file's length.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::clause::Clause;
use crate::error::{Error, Result};

const MAGIC: u32 = 0xBEEF_C0DE;
const DATA_VERSION: u32 = 1;
/// Page header: pgno u64, pad u16, flags u16, lower u16, upper u16
/// (an overflow page's u32 page count in place of lower/upper).
const PAGE_HEADER: usize = 16;
/// Node header: lo u16, hi u16, flags u16, ksize u16.
const NODE_HEADER: usize = 8;
const MAX_KEY: usize = 511;

const P_BRANCH: u16 = 0x01;
const P_LEAF: u16 = 0x02;
const P_OVERFLOW: u16 = 0x04;
const P_META: u16 = 0x08;

const F_BIGDATA: u16 = 0x01;

/// `MDB_DUPSORT | MDB_DUPFIXED | MDB_INTEGERDUP | MDB_REVERSEDUP`.
const DUP_FLAGS: u16 = 0x04 | 0x10 | 0x20 | 0x40;
/// No root: an empty database.
const P_INVALID: u64 = u64::MAX;

/// What the walk counted: the database record's numbers, as verified.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCounts {
    /// Page size, bytes.
    pub page_size: u64,
    /// Branch pages of the main database.
    pub branch_pages: u64,
    /// Leaf pages.
    pub leaf_pages: u64,
    /// Overflow pages (values too large for a leaf).
    pub overflow_pages: u64,
    /// Entries (key/value pairs).
    pub entries: u64,
    /// Tree depth.
    pub depth: u64,
}

/// One MDB_db record of a meta page.
#[derive(Clone, Copy, Debug)]
struct DbRecord {
    pad: u32,
    flags: u16,
    depth: u16,
    branch_pages: u64,
    leaf_pages: u64,
    overflow_pages: u64,
    entries: u64,
    root: u64,
}

struct Meta {
    page_size: u64,
    map_size: u64,
    last_page: u64,
    main: DbRecord,
    txnid: u64,
}

/// LMDB maps at least the meta's map size and the pages up to its last
/// page: more than a 64-bit process's user address space (2^47 bytes) can
/// never be mapped, and asking for it fails the open with ENOMEM.
const MAX_MAP: u64 = 1 << 47;

fn corrupt(at: String, detail: impl Into<String>) -> Error {
    Error::refused(Clause::FilePages, at, detail.into())
}

/// Not an LMDB environment at all, or cut short: what `Reader::open`
/// refuses as `lmdb.file.complete` too.
fn incomplete(detail: String) -> Error {
    Error::refused(Clause::FileComplete, "", detail)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn db_record(b: &[u8], at: usize) -> DbRecord {
    DbRecord {
        pad: u32_at(b, at),
        flags: u16_at(b, at + 4),
        depth: u16_at(b, at + 6),
        branch_pages: u64_at(b, at + 8),
        leaf_pages: u64_at(b, at + 16),
        overflow_pages: u64_at(b, at + 24),
        entries: u64_at(b, at + 32),
        root: u64_at(b, at + 40),
    }
}

/// Meta layout after the page header: magic u32, version u32, address
/// u64, mapsize u64, two db records (free, main; 48 bytes each), last
/// page u64, txnid u64.
const META_LEN: usize = PAGE_HEADER + 8 + 8 + 8 + 48 * 2 + 8 + 8;

fn read_meta(file: &[u8], offset: u64, which: u64) -> Result<Meta> {
    let at = || format!("meta page {which}");
    let b = usize::try_from(offset)
        .ok()
        .and_then(|o| file.get(o..o.checked_add(META_LEN)?))
        .ok_or_else(|| {
            incomplete(format!(
                "not a whole LMDB environment: the file ({} bytes) ends before meta page {which}",
                file.len()
            ))
        })?;
    let flags = u16_at(b, 10);
    let m = PAGE_HEADER;
    let magic = u32_at(b, m);
    if flags & P_META == 0 || magic != MAGIC {
        return Err(incomplete(format!(
            "not a whole LMDB environment: meta page {which} has flags {flags:#x} and magic {magic:#x}"
        )));
    }
    let version = u32_at(b, m + 4);
    if version != DATA_VERSION {
        return Err(corrupt(
            at(),
            format!("data version {version}, not {DATA_VERSION}"),
        ));
    }
    let free = db_record(b, m + 24);
    let main = db_record(b, m + 72);
    let page_size = u64::from(free.pad);
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(corrupt(
            at(),
            format!("page size {page_size} is not a power of two in 512..=65536"),
        ));
    }
    Ok(Meta {
        page_size,
        map_size: u64_at(b, m + 16),
        last_page: u64_at(b, m + 120),
        main,
        txnid: u64_at(b, m + 128),
    })
}

/// The walk's state: the file, its page count, and which pages were met.
struct Walk<'f> {
    file: &'f [u8],
    page_size: usize,
    pages: u64,
    seen: Vec<u64>,
    counts: PageCounts,
}

impl<'f> Walk<'f> {
    /// Marks `pgno` met; a page met twice is a cycle or a shared page.
    fn visit(&mut self, pgno: u64, at: &dyn Fn() -> String) -> Result<()> {
        if pgno >= self.pages {
            return Err(corrupt(
                at(),
                format!("page {pgno} is past the environment's {} pages", self.pages),
            ));
        }
        let (word, bit) = ((pgno / 64) as usize, pgno % 64);
        if self.seen[word] & (1 << bit) != 0 {
            return Err(corrupt(at(), format!("page {pgno} is reached twice")));
        }
        self.seen[word] |= 1 << bit;
        Ok(())
    }

    /// Asks the CPU to start loading the first line of page `pgno` (its
    /// header and node pointers). A hint: it reads nothing the walk relies
    /// on, never faults, and is dropped for a page not yet mapped.
    fn prefetch_header(&self, pgno: u64) {
        if pgno < self.pages {
            prefetch(self.page(pgno).as_ptr());
        }
    }

    /// Page `pgno`, already checked to be below `pages`.
    fn page(&self, pgno: u64) -> &'f [u8] {
        let start = pgno as usize * self.page_size;
        &self.file[start..start + self.page_size]
    }

    /// A value's overflow run starting at `first`, holding `size` bytes.
    fn overflow(&mut self, first: u64, size: u64, at: &dyn Fn() -> String) -> Result<()> {
        if first >= self.pages {
            return Err(corrupt(
                at(),
                format!(
                    "overflow page {first} is past the environment's {} pages",
                    self.pages
                ),
            ));
        }
        let head = self.page(first);
        let pgno = u64_at(head, 0);
        let flags = u16_at(head, 10);
        let count = u64::from(u32_at(head, 12));
        if pgno != first || flags != P_OVERFLOW {
            return Err(corrupt(
                format!("page {first}"),
                format!(
                    "is not the overflow page a value points to (number {pgno}, flags {flags:#x})"
                ),
            ));
        }
        let room = count
            .checked_mul(self.page_size as u64)
            .and_then(|b| b.checked_sub(PAGE_HEADER as u64));
        if count == 0 || first.checked_add(count).is_none_or(|end| end > self.pages) {
            return Err(corrupt(
                format!("page {first}"),
                format!(
                    "an overflow run of {count} pages does not fit the environment's {} pages",
                    self.pages
                ),
            ));
        }
        if room.is_none_or(|room| room < size) {
            return Err(corrupt(
                format!("page {first}"),
                format!("an overflow run of {count} pages cannot hold a value of {size} bytes"),
            ));
        }
        for p in first..first + count {
            self.visit(p, &|| format!("page {first}"))?;
        }
        self.counts.overflow_pages += count;
        Ok(())
    }

    /// Checks the page just read as a branch or leaf at `depth` (1 = the
    /// root); pushes a branch's children.
    fn node_page(&mut self, pgno: u64, depth: u64, stack: &mut Vec<(u64, u64)>) -> Result<()> {
        let ps = self.page_size;
        let p = self.page(pgno);
        let at = || format!("page {pgno}");
        let stated = u64_at(p, 0);
        let flags = u16_at(p, 10);
        let lower = usize::from(u16_at(p, 12));
        let upper = usize::from(u16_at(p, 14));
        if stated != pgno {
            return Err(corrupt(at(), format!("its header says page {stated}")));
        }
        let branch = match flags {
            P_BRANCH => true,
            P_LEAF => false,
            _ => {
                return Err(corrupt(
                    at(),
                    format!("flags {flags:#x}: a page of the tree is a branch or a leaf"),
                ))
            }
        };
        if lower < PAGE_HEADER || lower % 2 != 0 || lower > upper || upper > ps {
            return Err(corrupt(
                at(),
                format!(
                    "lower {lower} / upper {upper} do not bound free space in a {ps}-byte page"
                ),
            ));
        }
        let n = (lower - PAGE_HEADER) / 2;
        if n == 0 {
            return Err(corrupt(at(), "a page of the tree holds no node"));
        }
        // The node headers are scattered over the page, one cache miss
        // each: touching them all first, with loads that do not depend on
        // each other, lets the CPU wait for the misses together instead of
        // one by one (the check is memory-latency bound otherwise).
        let mut touched = 0u8;
        for i in 0..n {
            let off = usize::from(u16_at(p, PAGE_HEADER + 2 * i));
            touched ^= p.get(off).copied().unwrap_or(0);
        }
        std::hint::black_box(touched);
        let mut previous_key: Option<(usize, usize)> = None;
        for i in 0..n {
            let node_at = || format!("page {pgno}, node {i}");
            let off = usize::from(u16_at(p, PAGE_HEADER + 2 * i));
            if off < upper || off % 2 != 0 || off + NODE_HEADER > ps {
                return Err(corrupt(
                    node_at(),
                    format!("offset {off} is outside {upper}..{ps}"),
                ));
            }
            let lo = u64::from(u16_at(p, off));
            let hi = u64::from(u16_at(p, off + 2));
            let nflags = u16_at(p, off + 4);
            let ksize = usize::from(u16_at(p, off + 6));
            let key = off + NODE_HEADER;
            if ksize > MAX_KEY || key + ksize > ps {
                return Err(corrupt(
                    node_at(),
                    format!(
                        "a key of {ksize} bytes does not fit (at most {MAX_KEY}, inside the page)"
                    ),
                ));
            }
            // The first key of a branch page is empty: it stands for
            // everything below the second.
            let compared = !(branch && i == 0);
            if compared {
                if let Some((pk, pn)) = previous_key {
                    if !ascending(&p[pk..pk + pn], &p[key..key + ksize]) {
                        return Err(corrupt(node_at(), "keys are out of order"));
                    }
                }
                previous_key = Some((key, ksize));
            }
            if branch {
                let child = lo | hi << 16 | u64::from(nflags) << 32;
                if child >= self.pages {
                    return Err(corrupt(
                        node_at(),
                        format!(
                            "child page {child} is past the environment's {} pages",
                            self.pages
                        ),
                    ));
                }
                stack.push((child, depth + 1));
                continue;
            }
            let size = lo | hi << 16;
            let data = key + ksize;
            match nflags {
                0 => {
                    if data as u64 + size > ps as u64 {
                        return Err(corrupt(
                            node_at(),
                            format!("a value of {size} bytes runs past the page"),
                        ));
                    }
                }
                F_BIGDATA => {
                    if data + 8 > ps {
                        return Err(corrupt(node_at(), "an overflow pointer runs past the page"));
                    }
                    let first = u64_at(p, data);
                    self.overflow(first, size, &node_at)?;
                }
                other => {
                    return Err(corrupt(
                        node_at(),
                        format!(
                        "node flags {other:#x}: this binding has no sub-databases or duplicates"
                    ),
                    ))
                }
            }
            self.counts.entries += 1;
        }
        if branch {
            self.counts.branch_pages += 1;
        } else {
            self.counts.leaf_pages += 1;
        }
        Ok(())
    }
}

/// A prefetch of the cache line at `at` into every cache level.
#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees,
    // writes nothing and cannot fault, whatever the address; SSE, which
    // has it, is part of every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Whether `a < b` as LMDB orders keys (bytes, then length). Keys of this
/// binding are 9 bytes (a letter and a big-endian number): two keys of one
/// length from 8 to 16 bytes compare as their first 8 bytes and then their
/// last 8 (which overlap bytes already found equal), read as big-endian
/// words, without a call to `memcmp`.
fn ascending(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n == b.len() && (8..=16).contains(&n) {
        let word = |k: &[u8], at: usize| u64::from_be_bytes(k[at..at + 8].try_into().unwrap());
        let (x, y) = (word(a, 0), word(b, 0));
        if x != y {
            return x < y;
        }
        return word(a, n - 8) < word(b, n - 8);
    }
    a < b
}

/// Checks the page structure of the LMDB file at `path` (see the module
/// documentation): `Ok` with the verified counts, or a refusal naming
/// `lmdb.file.pages` with the page and what is wrong.
pub fn check_pages(path: &Path) -> Result<PageCounts> {
    let file = File::open(path)?;
    if file.metadata()?.len() == 0 {
        // Created, never initialized by LMDB: a writer killed at once
        // (what `Reader::open` says of it too).
        return Err(Error::Uncommitted);
    }
    // SAFETY: the map is read-only and lives only in this call. A file
    // changed by another process while it is mapped can show other bytes
    // (every read below is bounds-checked against the length at mapping
    // time) or, truncated, fault: the same condition LMDB's own map is
    // under, and why the check is for files at rest.
    let map = unsafe { Mmap::map(&file)? };
    let bytes: &[u8] = &map;
    let len = bytes.len() as u64;
    let first = read_meta(bytes, 0, 0)?;
    let second = read_meta(bytes, first.page_size, 1)?;
    if second.page_size != first.page_size {
        return Err(corrupt(
            "meta page 1".into(),
            format!(
                "page size {} differs from meta page 0's {}",
                second.page_size, first.page_size
            ),
        ));
    }
    // LMDB reads the meta with the larger txnid.
    let meta = if first.txnid < second.txnid {
        second
    } else {
        first
    };
    let db = meta.main;
    let ps = meta.page_size;
    let used = meta
        .last_page
        .checked_add(1)
        .and_then(|n| n.checked_mul(ps));
    if meta.map_size > MAX_MAP || used.is_none_or(|u| u > MAX_MAP) {
        return Err(corrupt(
            "meta".into(),
            format!(
                "a map size of {} bytes or a last page {} cannot be mapped",
                meta.map_size, meta.last_page
            ),
        ));
    }
    if db.flags & DUP_FLAGS != 0 {
        return Err(corrupt(
            "main database".into(),
            format!(
                "flags {:#x} ask for duplicates, which this binding never stores",
                db.flags
            ),
        ));
    }
    let needed = used.unwrap_or(u64::MAX);
    if len < needed {
        return Err(incomplete(format!(
            "the file has {len} bytes but its LMDB pages need {needed}: a truncated copy"
        )));
    }
    // LMDB reads no page past the meta's last page (MDB_PAGE_NOTFOUND):
    // the tree lives below it, and inside the file.
    let pages = (len / ps).min(meta.last_page.saturating_add(1));
    let mut walk = Walk {
        file: bytes,
        page_size: ps as usize,
        pages,
        seen: vec![0; pages.div_ceil(64) as usize],
        counts: PageCounts {
            page_size: ps,
            depth: u64::from(db.depth),
            ..PageCounts::default()
        },
    };
    // The two meta pages are no page of the tree.
    walk.visit(0, &|| "meta page 0".into())?;
    walk.visit(1, &|| "meta page 1".into())?;
    if db.root == P_INVALID {
        if db.depth != 0 || db.entries != 0 {
            return Err(corrupt(
                "main database".into(),
                format!("no root, yet depth {} and {} entries", db.depth, db.entries),
            ));
        }
    } else {
        if db.depth == 0 {
            return Err(corrupt("main database".into(), "a root, yet depth 0"));
        }
        let depth = u64::from(db.depth);
        let mut stack = vec![(db.root, 1u64)];
        let mut walked = 0u64;
        while let Some((pgno, level)) = stack.pop() {
            // The pages walked stay mapped, and counted in this process's
            // resident memory, until the map is dropped: given back every
            // 16 MiB, so that checking a file costs memory flat in its
            // size (an importer checks its shards in its own process).
            walked += ps;
            if walked >= RELEASE_EVERY {
                release_map(&map);
                walked = 0;
            }
            // The next page's header and node pointers start loading while
            // this page is checked: its first miss overlaps this page's.
            if let Some(&(next, _)) = stack.last() {
                walk.prefetch_header(next);
            }
            if level > depth {
                return Err(corrupt(
                    format!("page {pgno}"),
                    format!("the tree is deeper than its recorded depth {depth}"),
                ));
            }
            walk.visit(pgno, &|| format!("page {pgno}"))?;
            walk.node_page(pgno, level, &mut stack)?;
            let leaf = u16_at(walk.page(pgno), 10) == P_LEAF;
            if leaf != (level == depth) {
                return Err(corrupt(
                    format!("page {pgno}"),
                    format!(
                        "a {} at depth {level} of a tree of depth {depth}",
                        if leaf { "leaf" } else { "branch" }
                    ),
                ));
            }
        }
    }
    let c = walk.counts;
    let recorded = [
        ("branch pages", db.branch_pages, c.branch_pages),
        ("leaf pages", db.leaf_pages, c.leaf_pages),
        ("overflow pages", db.overflow_pages, c.overflow_pages),
        ("entries", db.entries, c.entries),
    ];
    for (what, said, found) in recorded {
        if said != found {
            return Err(corrupt(
                "main database".into(),
                format!("records {said} {what}, the tree holds {found}"),
            ));
        }
    }
    Ok(c)
}

/// Bytes of pages walked between two [`release_map`]s.
const RELEASE_EVERY: u64 = 16 << 20;

/// Drops this process's page-table entries of the read-only shared map
/// (`madvise(MADV_DONTNEED)`, Linux; elsewhere nothing): the page cache
/// keeps the pages and the next read maps them again, with the same bytes
/// (a file at rest), so every slice into the map stays valid.
fn release_map(map: &Mmap) {
    #[cfg(target_os = "linux")]
    // SAFETY: the range is exactly the live read-only shared file mapping
    // `map`; MADV_DONTNEED on it only drops page-table entries (see above).
    unsafe {
        libc::madvise(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            libc::MADV_DONTNEED,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

#[cfg(test)]
mod tests {
    use super::ascending;

    /// The word comparison orders keys exactly as bytes do: every pair of
    /// keys up to 18 bytes over a two-letter alphabet (so most pairs share
    /// a long prefix and many are equal), of equal and unequal lengths.
    #[test]
    fn ascending_is_lmdb_byte_order() {
        let mut state = 7u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        for _ in 0..200_000 {
            let n = (next() % 19) as usize;
            let m = if next() % 3 == 0 {
                (next() % 19) as usize
            } else {
                n
            };
            let a: Vec<u8> = (0..n).map(|_| b'f' + (next() % 2) as u8).collect();
            let b: Vec<u8> = (0..m).map(|_| b'f' + (next() % 2) as u8).collect();
            assert_eq!(ascending(&a, &b), a < b, "{a:?} < {b:?}");
            assert_eq!(ascending(&b, &a), b < a, "{b:?} < {a:?}");
            assert!(!ascending(&a, &a), "{a:?} < itself");
        }
    }
}
