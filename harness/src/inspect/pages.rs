//! The harness's own check of an LMDB file's pages, run before `heed`
//! opens a file an implementation wrote: LMDB trusts its pages, and a
//! damaged node array or branch pointer can crash the process walking
//! them, which here is the harness. Independent of the reference's check
//! (`molrec::lmdb::check_pages`): LMDB's on-disk layout (mdb.c of LMDB 0.9
//! and `mdb.master`, data version 1) read with `pread`, one page at a time.
//!
//! A file passes when both meta pages are LMDB's, name one page size, and
//! the main tree of the newer one (by transaction id) is sound: each page
//! inside the file and numbered as its position, a branch or a leaf at the
//! right depth, its node pointers and nodes inside the page, keys sorted,
//! no sub-database or duplicate node, each overflow run inside the file
//! and owned by one value, no page reached twice, and the record's counts
//! equal to what the walk found.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The clause a damaged page structure breaks.
pub const CLAUSE: &str = "lmdb.file.pages";
/// A file that is no LMDB environment at all (its meta pages are not
/// LMDB's) breaks the binding's first rule instead.
pub const NOT_LMDB: &str = "lmdb.file.single";

const HEADER: usize = 16;
const NODE: usize = 8;

struct Reader {
    file: File,
    size: usize,
    pages: u64,
}

impl Reader {
    fn read(&self, at: u64, buf: &mut [u8]) -> Result<(), String> {
        self.file
            .read_exact_at(buf, at)
            .map_err(|e| format!("cannot read {} bytes at {at}: {e}", buf.len()))
    }
}

fn le16(b: &[u8], i: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[i], b[i + 1]]))
}

fn le32(b: &[u8], i: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]))
}

fn le64(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

/// (page size, txnid, map size, last page, main db record of 48 bytes).
type MetaPage = (u64, u64, u64, u64, [u8; 48]);

fn meta(file: &File, at: u64, which: u8) -> Result<MetaPage, (&'static str, String)> {
    let mut b = [0u8; 160];
    file.read_exact_at(&mut b, at).map_err(|e| {
        (
            NOT_LMDB,
            format!("not an LMDB environment: meta page {which} cannot be read: {e}"),
        )
    })?;
    if le16(&b, 10) & 0x08 == 0 || le32(&b, 16) != 0xBEEF_C0DE {
        return Err((
            NOT_LMDB,
            format!("not an LMDB environment: meta page {which} is not LMDB's"),
        ));
    }
    if le32(&b, 20) != 1 {
        return Err((
            CLAUSE,
            format!("meta page {which} is not of LMDB data version 1"),
        ));
    }
    let page_size = le32(&b, 40);
    if !page_size.is_power_of_two() || !(512..=65536).contains(&page_size) {
        return Err((CLAUSE, format!("meta page {which}: page size {page_size}")));
    }
    let mut main = [0u8; 48];
    main.copy_from_slice(&b[88..136]);
    Ok((page_size, le64(&b, 144), le64(&b, 32), le64(&b, 136), main))
}

/// `Ok(())` when the page structure is sound, else the clause broken and
/// what is wrong where.
pub fn check(path: &Path) -> Result<(), (&'static str, String)> {
    let file = File::open(path).map_err(|e| (NOT_LMDB, format!("cannot open: {e}")))?;
    let len = file
        .metadata()
        .map_err(|e| (NOT_LMDB, e.to_string()))?
        .len();
    let m0 = meta(&file, 0, 0)?;
    let m1 = meta(&file, m0.0, 1)?;
    pages(file, len, m0, m1).map_err(|e| (CLAUSE, e))
}

fn pages(file: File, len: u64, m0: MetaPage, m1: MetaPage) -> Result<(), String> {
    if m0.0 != m1.0 {
        return Err("the two meta pages name different page sizes".into());
    }
    let (size, _, map_size, last, db) = if m1.1 > m0.1 { m1 } else { m0 };
    let limit = 1u64 << 47;
    if map_size > limit || last.saturating_add(1).saturating_mul(size) > limit {
        return Err(format!(
            "the meta's map size {map_size} or last page {last} is beyond any address space"
        ));
    }
    if le16(&db, 4) & (0x04 | 0x10 | 0x20 | 0x40) != 0 {
        return Err("the main database is flagged for duplicates".into());
    }
    let depth = le16(&db, 6);
    let recorded = [le64(&db, 8), le64(&db, 16), le64(&db, 24), le64(&db, 32)];
    let root = le64(&db, 40);
    let r = Reader {
        file,
        size: size as usize,
        // LMDB reads no page past the meta's last page.
        pages: (len / size).min(last.saturating_add(1)),
    };
    let mut owner = vec![false; r.pages as usize];
    let mut take = |p: u64| -> Result<(), String> {
        match owner.get_mut(p as usize) {
            None => Err(format!(
                "page {p} is past the end of the file ({} pages)",
                r.pages
            )),
            Some(true) => Err(format!("page {p} is reached twice")),
            Some(seen) => {
                *seen = true;
                Ok(())
            }
        }
    };
    take(0)?;
    take(1)?;
    // branch, leaf, overflow pages, entries
    let mut found = [0u64; 4];
    if root == u64::MAX {
        if depth != 0 || recorded[3] != 0 {
            return Err("an empty main database with a depth or entries".into());
        }
    } else {
        let mut page = vec![0u8; r.size];
        let mut todo = vec![(root, 1u64)];
        while let Some((p, level)) = todo.pop() {
            take(p)?;
            r.read(p * size, &mut page)?;
            let flags = le16(&page, 10);
            let (lower, upper) = (le16(&page, 12) as usize, le16(&page, 14) as usize);
            let branch = flags == 0x01;
            if le64(&page, 0) != p
                || !(branch || flags == 0x02)
                || branch == (level == depth)
                || level > depth
            {
                return Err(format!(
                    "page {p} (depth {level} of {depth}) has number {}, flags {flags:#x}",
                    le64(&page, 0)
                ));
            }
            if lower <= HEADER || lower % 2 == 1 || lower > upper || upper > r.size {
                return Err(format!("page {p}: lower {lower}, upper {upper}"));
            }
            let mut last_key: Option<&[u8]> = None;
            for i in 0..(lower - HEADER) / 2 {
                let off = le16(&page, HEADER + 2 * i) as usize;
                if off < upper || off % 2 == 1 || off + NODE > r.size {
                    return Err(format!("page {p}: node {i} at {off}"));
                }
                let n = &page[off..];
                let (lo, hi, nf, ks) = (le16(n, 0), le16(n, 2), le16(n, 4), le16(n, 6) as usize);
                if ks > 511 || off + NODE + ks > r.size {
                    return Err(format!("page {p}: node {i} has a key of {ks} bytes"));
                }
                let key = &n[NODE..NODE + ks];
                if !(branch && i == 0) {
                    if last_key.is_some_and(|k| k >= key) {
                        return Err(format!("page {p}: node {i}'s key is out of order"));
                    }
                    last_key = Some(key);
                }
                if branch {
                    todo.push((lo | hi << 16 | nf << 32, level + 1));
                    continue;
                }
                found[3] += 1;
                let data_size = lo | hi << 16;
                let data = off + NODE + ks;
                match nf {
                    0 if data as u64 + data_size <= size => {}
                    1 if data + 8 <= r.size => {
                        let first = le64(&page, data);
                        let mut head = [0u8; HEADER];
                        if first >= r.pages {
                            return Err(format!(
                                "page {p}: node {i}'s overflow page {first} is past the end"
                            ));
                        }
                        r.read(first * size, &mut head)?;
                        let run = le32(&head, 12);
                        let fits = first.checked_add(run).is_some_and(|end| {
                            end <= r.pages && run * size >= data_size + HEADER as u64
                        });
                        if le64(&head, 0) != first || le16(&head, 10) != 0x04 || run == 0 || !fits {
                            return Err(format!(
                                "page {first}: not an overflow run holding {data_size} bytes"
                            ));
                        }
                        for q in first..first + run {
                            take(q)?;
                        }
                        found[2] += run;
                    }
                    _ => {
                        return Err(format!(
                            "page {p}: node {i} (flags {nf:#x}, {data_size} bytes) does not fit"
                        ))
                    }
                }
            }
            found[usize::from(!branch)] += 1;
        }
    }
    if found != recorded {
        return Err(format!(
            "the main database records {recorded:?} (branch, leaf, overflow pages, entries), the tree holds {found:?}"
        ));
    }
    Ok(())
}
