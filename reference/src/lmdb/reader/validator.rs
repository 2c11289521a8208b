//! What `mrec validate` runs beyond a read: every part of an opened file
//! checked with one refusal per failing part ([`Reader::violations`]), the
//! `should`s a file breaks that readers accept ([`Reader::findings`]), and
//! the pass over every key and value ([`RecordTxn::check_every_value`]).

use super::{Reader, RecordTxn};
use crate::arrays::RecordArrays;
use crate::clause::Clause;
use crate::error::{refuse, Error, Finding, Result};
use crate::frame_bytes;
use crate::lmdb::{lmdb_error, parse_numbered_key, FF_KEY, INDEX_KEY, META_KEY};
use crate::model::*;
use crate::precision;

impl Reader {
    /// Everything an opened file can break, one refusal per failing part
    /// rather than the first only: the pass over every key and value
    /// ([`RecordTxn::check_every_value`]), the index's own columns, the
    /// force field, then each record in order. Empty: the file conforms
    /// (`open` has checked `meta` and the index). What `mrec validate` runs.
    pub fn violations(&self) -> Vec<Error> {
        let mut found = Vec::new();
        let txn = match self.txn() {
            Ok(txn) => txn,
            Err(e) => return vec![e],
        };
        match txn.check_every_value() {
            Ok(refusals) => found.extend(refusals),
            Err(e) => found.push(e),
        }
        found.extend(txn.index_columns().err());
        found.extend(txn.forcefield().err());
        for r in 0..self.n_records() {
            match txn.record_arrays(r) {
                Ok(record) => found.extend(self.check_atom_count(r, &record).err()),
                Err(e) => found.push(e),
            }
        }
        found
    }

    /// The binding's `n_atoms` of record r against what the record holds
    /// (DIGEST §3): the rows of the system's `atoms`, else of `atoms` at
    /// the first frame that has it, else 0. Readers hand the index back as
    /// written; only the validator recomputes it. (`has_trajectory` cannot
    /// be checked against the record: the flag is what says whether a
    /// record without frames has a trajectory, and one with frames but
    /// without the flag is refused when it is read.)
    fn check_atom_count(&self, r: u64, record: &RecordArrays) -> Result<()> {
        let from_system = record
            .system
            .as_ref()
            .and_then(|s| s.blocks.get("atoms"))
            .map(|b| b.count);
        let from_trajectory = || {
            let atoms = record.trajectory.as_ref()?.blocks.get("atoms")?;
            let first = atoms.updates.first()?;
            Some(first.count)
        };
        let holds = from_system.or_else(from_trajectory).unwrap_or(0);
        let written = self.atom_counts.get(r as usize).copied().unwrap_or(0);
        if written != holds {
            refuse!(
                IndexAtomCount,
                format!("index.records.columns.n_atoms[{r}]"),
                "is {written}; record {r} has {holds} atoms"
            );
        }
        Ok(())
    }

    /// What a validator reports beside [`Reader::violations`]: the
    /// `should`s a file breaks that every reader accepts. Today one kind: f64
    /// values off the grid of their column's declared precision (the
    /// writer's defect; frame.md, "Declared precision"), one finding per
    /// column of the index, of a system and of a trajectory block, with how
    /// many values and the first. Parts that fail to read are left to
    /// `violations`. What `mrec validate` prints after the violations.
    pub fn findings(&self) -> Vec<Finding> {
        let mut found = Vec::new();
        let Ok(txn) = self.txn() else {
            return found;
        };
        if let Ok(index) = txn.index_columns() {
            for (name, col) in &index {
                off_grid_column(col, &format!("index.{name}"), &mut found);
            }
        }
        for r in 0..self.n_records() {
            let Ok(record) = txn.record_arrays(r) else {
                continue;
            };
            if let Some(system) = &record.system {
                for (block, b) in &system.blocks {
                    for (name, col) in &b.columns {
                        let at = || format!("records[{r}].system.blocks.{block}.columns.{name}");
                        if col.precision.is_some() {
                            off_grid_column(col, &at(), &mut found);
                        }
                    }
                }
            }
            let Some(traj) = &record.trajectory else {
                continue;
            };
            for (block, series) in &traj.blocks {
                let Some(decl) = self.schema.blocks.get(block) else {
                    continue;
                };
                for (name, column) in &series.columns {
                    let (Some(p), ColumnData::F64(values)) = (
                        decl.columns.get(name).and_then(|c| c.precision),
                        &column.data,
                    ) else {
                        continue;
                    };
                    let width = column.row_width();
                    let mut off = 0usize;
                    let mut first = None;
                    for (u, update) in series.updates.iter().enumerate() {
                        let range = column.elements(update);
                        let Some(part) = values.get(range) else {
                            continue;
                        };
                        if let Some((n, i)) =
                            precision::off_grid(part, width, column.mask(u as u32), p)
                        {
                            off += n;
                            first.get_or_insert((u, part[i]));
                        }
                    }
                    if let Some((u, value)) = first {
                        let frame = series
                            .frame_updates
                            .iter()
                            .position(|f| *f == Some(u as u32))
                            .unwrap_or(0);
                        found.push(Finding {
                            clause: Clause::PrecisionOffGrid,
                            at: format!("records[{r}].trajectory.blocks.{block}.columns.{name}"),
                            detail: format!(
                                "{off} value(s) off the grid of precision {p} (quantum {}); the first in the update of frame {frame}: {value:?}",
                                precision::quantum(p)
                            ),
                        });
                    }
                }
            }
        }
        found
    }
}

impl RecordTxn<'_> {
    /// One pass over every key and value, for what the record reads never
    /// look at (they address keys, so they do not scan for the rest): a
    /// refusal of [`Clause::KeysScheme`] for keys outside the scheme
    /// (DIGEST §1: not `meta`, `index`, `ff`, `r` or `s` and a u64
    /// big-endian below `n_records`, or `f` and one below `n_frames`), and
    /// one of [`Clause::FramePadding`] for frame values (`index`, `ff`, `s`,
    /// `f`) whose padding after the header is not zero bytes, and one of
    /// [`Clause::BoxUndefinedCell`] for an undefined cell stored with
    /// vectors other than the identity or without its boundary. Each message
    /// gives how many there are and the first few keys. What `mrec validate`
    /// adds to the reads.
    pub fn check_every_value(&self) -> Result<Vec<Error>> {
        let (n_records, n_frames) = (self.reader.n_records(), self.reader.n_frames);
        let mut stray = Tally::default();
        let mut padding = Tally::default();
        let mut cells = Tally::default();
        for item in self.reader.db.iter(&self.txn).map_err(lmdb_error)? {
            let (key, value) = item.map_err(lmdb_error)?;
            let is_frame = match (key, parse_numbered_key(key)) {
                (META_KEY, _) => false,
                (INDEX_KEY | FF_KEY, _) => true,
                (_, Some((prefix, n))) => {
                    let (bound, name) = match prefix {
                        b'f' => (n_frames, "n_frames"),
                        _ => (n_records, "n_records"),
                    };
                    if n >= bound {
                        stray.add(key, || format!("is not below {name} = {bound}"));
                        continue;
                    }
                    prefix != b'r'
                }
                _ => {
                    stray.add(key, || "is not a key of the scheme".to_string());
                    continue;
                }
            };
            if is_frame {
                if let Some(bytes) = frame_bytes::nonzero_padding(value) {
                    padding.add(key, || format!("bytes {bytes:?}"));
                }
                if let Some(why) = frame_bytes::undefined_cell_misstored(value) {
                    cells.add(key, || why.to_string());
                }
            }
        }
        Ok([
            stray.refusal(
                Clause::KeysScheme,
                "outside the scheme (meta, index, ff, r/s + record number, f + frame ordinal)",
            ),
            padding.refusal(
                Clause::FramePadding,
                "whose frame value pads its header with bytes that are not zero",
            ),
            cells.refusal(
                Clause::BoxUndefinedCell,
                "whose undefined cell is not stored as a writer must store it",
            ),
        ]
        .into_iter()
        .flatten()
        .collect())
    }
}

/// Reports a system or index column whose values are off the grid of its
/// own declared precision.
fn off_grid_column(col: &Column, at: &str, found: &mut Vec<Finding>) {
    let (Some(p), ColumnData::F64(values)) = (col.precision, &col.data) else {
        return;
    };
    let width = col
        .shape
        .get(1..)
        .unwrap_or_default()
        .iter()
        .product::<u64>() as usize;
    if let Some((n, i)) = precision::off_grid(values, width, col.validity.as_deref(), p) {
        found.push(Finding {
            clause: Clause::PrecisionOffGrid,
            at: at.to_string(),
            detail: format!(
                "{n} value(s) off the grid of precision {p} (quantum {}); the first, values[{i}]: {:?}",
                precision::quantum(p),
                values[i]
            ),
        });
    }
}

/// A key as a message names it: `r:7`, `s:7`, `f:7` for a numbered key,
/// the text of a short printable one, else `hex:` and its bytes.
fn key_label(key: &[u8]) -> String {
    if let Some((prefix, n)) = parse_numbered_key(key) {
        return format!("{}:{n}", prefix as char);
    }
    if key.len() <= 32 && key.iter().all(|b| b.is_ascii_graphic()) {
        return String::from_utf8_lossy(key).into_owned();
    }
    let shown = &key[..key.len().min(32)];
    let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
    let more = if key.len() > shown.len() { "..." } else { "" };
    format!("hex:{hex}{more} ({} bytes)", key.len())
}

/// Keys found breaking one rule: how many, and the first few named.
#[derive(Default)]
struct Tally {
    count: u64,
    named: Vec<String>,
}

impl Tally {
    /// Keys named in the message; the count covers the rest.
    const NAMED: usize = 4;

    /// Counts `key`; `why` is only formatted for the keys named.
    fn add(&mut self, key: &[u8], why: impl FnOnce() -> String) {
        self.count += 1;
        if self.named.len() < Self::NAMED {
            self.named.push(format!("{} {}", key_label(key), why()));
        }
    }

    /// The refusal of `clause` naming what was found, if anything was.
    fn refusal(self, clause: Clause, what: &str) -> Option<Error> {
        (self.count > 0).then(|| {
            let more = if self.count > self.named.len() as u64 {
                "; ..."
            } else {
                ""
            };
            Error::refused(
                clause,
                "keys",
                format!(
                    "{} key(s) {what}: {}{more}",
                    self.count,
                    self.named.join("; ")
                ),
            )
        })
    }
}
