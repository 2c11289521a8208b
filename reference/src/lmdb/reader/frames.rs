//! Frames by global ordinal: [`Reader::frame`] resolves frame `k` of a
//! record (global ordinal `first_frame[r] + k`) without replaying the
//! record's values: it reads the system and, for each block, the latest
//! update at or before `k` that holds it (and the cell's), nothing else.
//!
//! Which update that is comes from the record's [`UpdateMap`]: where the
//! trajectory updates each block and the cell. Making it reads every
//! frame's header once (the walk of `for_each_frame`, no values copied,
//! repeated `blocks` texts not decoded again, with that walk's checks and
//! `prepare_update`'s rules for every update). The reader keeps, for the
//! records it met, a [`RecordEntry`]: the map, the decoded system, the
//! layouts of the record's updates and where each frame's value is
//! ([`RecordCache`], bounded). The other frames of a record then cost
//! their own values only: the rest of the header after a `blocks` text
//! already matched, and the columns copied out. A shuffled pass over every
//! frame decodes each record's headers and system once while its entries
//! fit the budget, and once per frame (the record's headers and system
//! each time) when they do not. A map is small: a block updated at every
//! frame from some frame on is one number, whatever the length.
//!
//! Where a value is stays valid only while the read transaction it was
//! found in lives, so frames are read through the reader's own
//! transaction ([`FramesTxn`]), opened at the first frame read and kept as
//! long as the reader (a committed collection never changes: it pins
//! nothing a writer waits for). The entries' locations come from it.

use super::walk::{check_update_blocks, update_step};
use super::{Reader, RecordTxn};
use crate::clause::Clause;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::frame_bytes::{
    blocks_reusable, blocks_text, decode, decode_rest, extend_buffer, same_blocks_at, FrameInfo,
};
use crate::lmdb::layout::{layout_of, Layout, LayoutBlock, LayoutColumn, LayoutData};
use crate::lmdb::resolve::{block_columns_rules, block_declaration};
use crate::lmdb::{frame_key, lmdb_error};
use crate::model::*;
use crate::validate;
use heed::{RoTxn, WithoutTls};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

/// Where a record's trajectory updates each block and the cell.
#[derive(Debug)]
pub(crate) struct UpdateMap {
    /// Each block the trajectory updates (by name, ascending) and the
    /// frames whose update holds it.
    blocks: Vec<(String, Positions)>,
    /// The frames whose update carries a cell.
    cells: Positions,
}

/// Frames of a record, ascending.
#[derive(Debug)]
enum Positions {
    /// Every frame from this one to the record's last.
    From(u64),
    /// These frames.
    At(Box<[u64]>),
}

impl Positions {
    /// `list` (ascending) of a record of `frames` frames, compacted.
    fn of(list: Vec<u64>, frames: u64) -> Positions {
        match list.first() {
            Some(&first) if list.len() as u64 == frames - first => Positions::From(first),
            _ => Positions::At(list.into_boxed_slice()),
        }
    }

    /// The last frame at or before `k`.
    fn latest(&self, k: u64) -> Option<u64> {
        match self {
            Positions::From(first) => (*first <= k).then_some(k),
            Positions::At(list) => {
                let i = list.partition_point(|&p| p <= k);
                list.get(i.checked_sub(1)?).copied()
            }
        }
    }

    /// Bytes this takes, roughly.
    fn cost(&self) -> usize {
        match self {
            Positions::From(_) => 16,
            Positions::At(list) => 16 + 8 * list.len(),
        }
    }
}

impl UpdateMap {
    fn cost(&self) -> usize {
        let blocks: usize = self
            .blocks
            .iter()
            .map(|(name, p)| 24 + name.len() + p.cost())
            .sum();
        64 + blocks + self.cells.cost()
    }

    /// The frame whose update of `block` is in effect at frame `k`.
    fn latest(&self, block: &str, k: u64) -> Option<u64> {
        let i = self
            .blocks
            .binary_search_by(|(name, _)| name.as_str().cmp(block))
            .ok()?;
        self.blocks[i].1.latest(k)
    }
}

/// What frames of a record need of it besides their own values: its
/// update map, its system (decoded, checked by the model rules), the
/// layouts of its updates and where each frame's value is.
#[derive(Debug)]
pub(crate) struct RecordEntry {
    map: UpdateMap,
    system: Option<Arc<Frame>>,
    /// The layouts of the record's full updates whose `blocks` text an
    /// update may repeat (most records have one), shared with the other
    /// records laid out alike ([`RecordCache::layout`]).
    layouts: Vec<Arc<KnownLayout>>,
    /// The declared per-step keys: what an update's meta is read into.
    meta_template: Document,
    /// Each frame's value, in the reader's [`FramesTxn`].
    values: Vec<ValueAt>,
}

/// A full update's layout and its `blocks` text and payload length: an
/// update with the same text and length has the same blocks.
#[derive(Debug)]
pub(crate) struct KnownLayout {
    text: Box<[u8]>,
    payload_len: usize,
    layout: Arc<Layout>,
}

impl KnownLayout {
    /// Layouts kept per record (a record whose updates are laid out in
    /// more ways decodes the others' headers in full).
    const PER_RECORD: usize = 4;
}

/// Where a frame's value is (its address in the map LMDB handed out in the
/// reader's [`FramesTxn`], and its length) and how it is laid out.
#[derive(Debug, Clone, Copy)]
struct ValueAt {
    address: usize,
    len: usize,
    /// The index of its layout in [`RecordEntry::layouts`], with where the
    /// rest of its header starts; `None`: decoded in full when read.
    known: Option<(u8, u32)>,
}

impl RecordEntry {
    /// The bytes this takes, roughly (allocations included: a `BTreeMap`
    /// of a few entries takes a node of eleven, some 1.4 KiB here).
    fn cost(&self) -> usize {
        const NODE: usize = 1400;
        let system = self.system.as_ref().map_or(0, |s| {
            let columns: usize = s
                .blocks
                .values()
                .flat_map(|b| b.columns.values())
                .map(|c| match &c.data {
                    ColumnData::String(v) => v.iter().map(|s| 40 + s.len()).sum(),
                    data => data.len() * data.dtype().item_size().unwrap_or(8) + 32,
                })
                .sum();
            NODE * (1 + s.blocks.len()) + columns
        });
        let values = self.values.len() * std::mem::size_of::<ValueAt>();
        256 + self.map.cost() + system + 16 * self.layouts.len() + values
    }
}

/// The [`RecordEntry`]s of the records a reader met, by record. Bounded:
/// past [`RecordCache::BUDGET`] bytes (roughly counted) every entry is
/// forgotten, so a reader's memory stays flat in the size of the
/// collection.
#[derive(Debug, Default)]
pub(crate) struct RecordCache {
    entries: HashMap<u64, Arc<RecordEntry>>,
    cost: usize,
    /// The layouts of the entries, by `blocks` text and payload length:
    /// records of one shape (the same columns and row counts) share one.
    layouts: HashMap<(Box<[u8]>, usize), Arc<KnownLayout>>,
}

impl RecordCache {
    /// 16 MiB: some 2,500 records of a few dozen atoms and frames, with
    /// their systems (the benchmark's 2,000 fit).
    const BUDGET: usize = 16 << 20;
    /// Layouts kept (all forgotten when full).
    const LAYOUTS: usize = 4096;

    /// The layout of this `blocks` text and payload length: the one kept,
    /// or `make`'s, kept.
    fn layout(
        &mut self,
        text: &[u8],
        payload_len: usize,
        make: impl FnOnce() -> Layout,
    ) -> Arc<KnownLayout> {
        let key = (Box::<[u8]>::from(text), payload_len);
        if let Some(known) = self.layouts.get(&key) {
            return Arc::clone(known);
        }
        if self.layouts.len() >= Self::LAYOUTS {
            self.layouts.clear();
        }
        let known = Arc::new(KnownLayout {
            text: key.0.clone(),
            payload_len,
            layout: Arc::new(make()),
        });
        self.layouts.insert(key, Arc::clone(&known));
        known
    }

    fn get(&self, r: u64) -> Option<Arc<RecordEntry>> {
        self.entries.get(&r).cloned()
    }

    fn insert(&mut self, r: u64, entry: Arc<RecordEntry>) {
        let cost = entry.cost() + 48;
        if self.cost + cost > Self::BUDGET {
            self.entries.clear();
            self.cost = 0;
        }
        if self.entries.insert(r, entry).is_none() {
            self.cost += cost;
        }
    }
}

/// The reader's own read transaction for frames by ordinal: the values
/// its entries point at stay valid while it lives (LMDB keeps a read
/// transaction's values in place until it ends). Opened at the first
/// frame read; kept until the reader is dropped. (In a forked child the
/// binding drops inherited readers: ending the parent's transaction there
/// only marks its reader slot idle, which no reader of a committed
/// collection looks at; and the environment is then closed, so the child
/// opens the file afresh.)
#[derive(Default)]
pub(crate) struct FramesTxn {
    txn: Option<RoTxn<'static, WithoutTls>>,
}

/// One frame resolved by its global ordinal ([`Reader::frame`]): the step, time and per-step
/// meta of that frame, the cell in effect, and each block's update in
/// effect there, viewed in place in the read transaction.
pub struct ResolvedFrame<'t> {
    /// The record.
    pub record: u64,
    /// The frame's position in its record (`k`).
    pub position: u64,
    /// Step number.
    pub step: i64,
    /// Time, when the trajectory has times.
    pub time: Option<f64>,
    /// Per-step meta (typed JSON, every declared key).
    pub meta: Document,
    /// The cell in effect, if the trajectory has one by this frame.
    pub cell: Option<Cell>,
    /// How many frame values were read to resolve it (1 when every block
    /// and the cell in effect are this frame's own).
    pub values_read: usize,
    schema: &'t SequenceSchema,
    entry: Arc<RecordEntry>,
    /// By name, ascending.
    blocks: Vec<ResolvedBlock<'t>>,
}

/// A block present or empty at a resolved frame, viewed in place.
pub struct FrameBlock<'a> {
    block: &'a LayoutBlock,
    decl: Option<&'a BlockDecl>,
    payload: &'a [u8],
    /// The frame (of the record) whose update this is.
    pub position: u64,
}

/// A column of a [`FrameBlock`], viewed in place.
#[derive(Clone, Copy)]
pub struct FrameColumn<'a> {
    column: &'a LayoutColumn,
    count: u64,
    payload: &'a [u8],
}

impl<'t> ResolvedFrame<'t> {
    /// The record's system (checked by the model rules), if it has one.
    pub fn system(&self) -> Option<&Frame> {
        self.entry.system.as_deref()
    }

    /// [`ResolvedFrame::system`], shared: the reader keeps one system per
    /// record for every frame of it (no copy).
    pub fn shared_system(&self) -> Option<Arc<Frame>> {
        self.entry.system.clone()
    }

    /// Every block present or empty at this frame, by name.
    pub fn blocks(&self) -> impl Iterator<Item = FrameBlock<'_>> {
        self.blocks.iter().map(|b| {
            let block = &b.layout.blocks[b.index];
            FrameBlock {
                block,
                decl: self.schema.blocks.get(&block.name),
                payload: b.payload,
                position: b.position,
            }
        })
    }

    /// Block `name`, if it is present or empty at this frame.
    pub fn block(&self, name: &str) -> Option<FrameBlock<'_>> {
        self.blocks().find(|b| b.name() == name)
    }
}

impl<'a> FrameBlock<'a> {
    /// The block's name.
    pub fn name(&self) -> &'a str {
        &self.block.name
    }

    /// Rows (0: the block is empty here).
    pub fn count(&self) -> u64 {
        self.block.count
    }

    /// The structural shape: the declaration's (none on an empty update).
    pub fn structural_shape(&self) -> Option<&'a [u64]> {
        self.decl
            .and_then(|d| validate::declared_shape(d, self.block.count))
    }

    /// Row-reference targets: the declaration's.
    pub fn targets(&self) -> Option<&'a BTreeMap<String, String>> {
        self.decl.map(|d| &d.targets)
    }

    /// The update's attributes.
    pub fn attributes(&self) -> &'a Document {
        &self.block.head.attributes
    }

    /// The columns, by name.
    pub fn columns(&self) -> impl Iterator<Item = FrameColumn<'a>> + 'a {
        let (count, payload) = (self.block.count, self.payload);
        self.block.columns.iter().map(move |column| FrameColumn {
            column,
            count,
            payload,
        })
    }

    /// Column `name`.
    pub fn column(&self, name: &str) -> Option<FrameColumn<'a>> {
        self.columns().find(|c| c.name() == name)
    }
}

impl<'a> FrameColumn<'a> {
    /// The column's name.
    pub fn name(&self) -> &'a str {
        &self.column.name
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.column.dtype
    }

    /// The shape after the leading axis (the block's rows).
    pub fn trailing(&self) -> &'a [u64] {
        &self.column.trailing
    }

    /// Rows.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// A numeric column's buffer: little-endian, row-major (`None` for a
    /// string column).
    pub fn bytes(&self) -> Option<&'a [u8]> {
        match &self.column.data {
            LayoutData::Buffer(offset, len) => self.payload.get(*offset..offset + len),
            LayoutData::Strings(_) => None,
        }
    }

    /// A string column's values, flat and row-major.
    pub fn strings(&self) -> Option<&'a [String]> {
        match &self.column.data {
            LayoutData::Strings(values) => Some(values),
            LayoutData::Buffer(..) => None,
        }
    }

    /// Appends the column's values to `out` (of the column's dtype), bool
    /// bytes checked to be 0 / 1.
    pub fn append_to(&self, out: &mut ColumnData) -> Result<()> {
        if out.dtype() != self.column.dtype {
            return Err(Error::refused(
                Clause::FrameBufferBounds,
                format!("columns.{}", self.name()),
                format!(
                    "a {} column appended to {} values",
                    self.column.dtype,
                    out.dtype()
                ),
            ));
        }
        match (&self.column.data, out) {
            (LayoutData::Strings(values), ColumnData::String(out)) => {
                out.extend_from_slice(values);
                Ok(())
            }
            (LayoutData::Buffer(..), out) => {
                let bytes = self.bytes().ok_or_else(|| {
                    Error::refused(
                        Clause::FrameBufferBounds,
                        format!("columns.{}", self.name()),
                        "a buffer runs past the value",
                    )
                })?;
                extend_buffer(out, bytes).map_err(|e| e.within(&format!("columns.{}", self.name())))
            }
            _ => Ok(()),
        }
    }

    /// The mask as bools (true = valid), `None` when every row is valid.
    pub fn mask(&self) -> Result<Option<Vec<bool>>> {
        let Some((offset, len)) = self.column.mask else {
            return Ok(None);
        };
        let at = || format!("columns.{}", self.name());
        let bytes = self.payload.get(offset..offset + len).ok_or_else(|| {
            Error::refused(
                Clause::FrameBufferBounds,
                at(),
                "a mask runs past the value",
            )
        })?;
        if bytes.len() as u64 != self.count {
            return Err(Error::refused(
                Clause::ValidityLength,
                at(),
                format!("a mask of {} bytes for {} rows", bytes.len(), self.count),
            ));
        }
        if let Some(b) = bytes.iter().find(|&&b| b > 1) {
            return Err(Error::refused(
                Clause::TypedValue,
                at(),
                format!("a mask holds the byte {b}, not 0 / 1"),
            ));
        }
        Ok(bytes
            .contains(&0)
            .then(|| bytes.iter().map(|&b| b == 1).collect()))
    }
}

impl Reader {
    /// Frame `j` by its global ordinal (`first_frame[r] + k`): the step,
    /// time and per-step meta of frame k of record r, the record's system,
    /// the cell in effect and, for each block, the latest update at or
    /// before k that holds it, viewed in place. Only those updates' values
    /// are read, and, once per record while the reader keeps its entry,
    /// every header of the record and its system.
    ///
    /// Checks: the bytes of every update read; the system's model rules;
    /// and, with each record's entry, what the walk of every header checks
    /// (bytes, declaration, per-step keys), `prepare_update`'s rules for
    /// every update, steps increasing, times on all frames or none, one
    /// `cell_defined` and one column set per block. The rules over
    /// resolved frames (aligned blocks' row counts, row-reference ranges)
    /// are [`RecordTxn::record_arrays`]'s, not checked here.
    pub fn frame(&self, j: u64) -> Result<ResolvedFrame<'_>> {
        let fetched = self.fetch_frame(j)?;
        self.resolve_frame(fetched, Document::new())
    }

    /// [`Reader::frame`] of every ordinal of `js`, in order, each handed
    /// to `visit`: the same frames, read faster than one by one (while
    /// frame i is decoded and copied out, frame i + 1's values are on their
    /// way into the processor's cache; a shuffled reader finds them cold).
    pub fn frames<F>(&self, js: &[u64], mut visit: F) -> Result<()>
    where
        F: FnMut(&ResolvedFrame<'_>) -> Result<()>,
    {
        let mut meta = Document::new();
        let mut ahead = match js.first() {
            Some(&j) => Some(self.fetch_frame(j)?),
            None => None,
        };
        for i in 0..js.len() {
            let Some(this) = ahead.take() else { break };
            if let Some(&next) = js.get(i + 1) {
                let next = self.fetch_frame(next)?;
                for (_, value) in &next.values {
                    super::prefetch(value.as_ptr(), value.len());
                }
                ahead = Some(next);
            }
            let frame = self.resolve_frame(this, std::mem::take(&mut meta))?;
            visit(&frame)?;
            // The next frame's per-step keys are most likely these: its
            // meta is read into this map.
            meta = frame.meta;
        }
        Ok(())
    }

    /// The first half of [`Reader::frame`]: the record's entry and the
    /// values of the updates frame `j` resolves to.
    fn fetch_frame(&self, j: u64) -> Result<Fetched<'_>> {
        let (r, k) = self.locate_frame(j).ok_or_else(|| {
            Error::refused(
                Clause::IndexCount,
                format!("frames[{j}]"),
                format!("no frame {j}: the collection has {}", self.n_frames()),
            )
        })?;
        let entry = self.record_entry(r)?;
        let map = &entry.map;
        // The frames to read: k itself, then where each block's update in
        // effect is, then the cell's.
        let mut wanted = vec![k];
        for (_, positions) in &map.blocks {
            if let Some(p) = positions.latest(k) {
                if !wanted.contains(&p) {
                    wanted.push(p);
                }
            }
        }
        let cell_at = map.cells.latest(k);
        if let Some(p) = cell_at.filter(|p| !wanted.contains(p)) {
            wanted.push(p);
        }
        let mut values = Vec::with_capacity(wanted.len());
        for p in wanted {
            let Some(at) = entry.values.get(p as usize) else {
                return Err(Error::refused(
                    Clause::FrameMissing,
                    format!("records[{r}].trajectory.frames[{p}]"),
                    "no value for this frame in the record's entry",
                ));
            };
            // SAFETY: `at` was read from a value LMDB handed out in this
            // reader's `FramesTxn` (`record_entry` takes the locations from
            // it, and no other transaction's), and that transaction lives
            // as long as the reader, which `&self` borrows for the slice's
            // lifetime: LMDB keeps a read transaction's values mapped and
            // unchanged until it ends. The bytes are only read.
            let value = unsafe { std::slice::from_raw_parts(at.address as *const u8, at.len) };
            values.push((p, value));
        }
        Ok(Fetched {
            r,
            k,
            cell_at,
            entry,
            values,
        })
    }

    /// The second half of [`Reader::frame`]: the fetched updates decoded
    /// (the frame's meta read into `meta`'s map when it has its keys).
    fn resolve_frame<'t>(
        &'t self,
        fetched: Fetched<'t>,
        meta: Document,
    ) -> Result<ResolvedFrame<'t>> {
        let Fetched {
            r,
            k,
            cell_at,
            entry,
            values,
        } = fetched;
        let mut out = ResolvedFrame {
            record: r,
            position: k,
            step: 0,
            time: None,
            meta: Document::new(),
            cell: None,
            values_read: values.len(),
            schema: &self.schema,
            blocks: Vec::with_capacity(entry.map.blocks.len()),
            entry,
        };
        let entry = Arc::clone(&out.entry);
        let map = &entry.map;
        let mut meta = Some(meta);
        for (p, value) in values {
            let located = |e: Error| e.within(&format!("records[{r}].trajectory.frames[{p}]"));
            let template = match meta.take() {
                Some(m) if m.len() == entry.meta_template.len() => m,
                _ => entry.meta_template.clone(),
            };
            let (layout, payload, mut info) = self
                .entry_update(&entry, p, value, template)
                .map_err(located)?;
            if p == k {
                out.step = update_step(&info, &self.schema).map_err(located)?;
                out.time = info.time;
                out.meta = std::mem::take(&mut info.meta);
            }
            if Some(p) == cell_at {
                out.cell = info.cell.map(|c| *c);
            }
            for (index, block) in layout.blocks.iter().enumerate() {
                if map.latest(&block.name, k) == Some(p) {
                    out.blocks.push(ResolvedBlock {
                        layout: Arc::clone(&layout),
                        index,
                        payload,
                        position: p,
                    });
                }
            }
        }
        out.blocks.sort_by(|a, b| {
            a.layout.blocks[a.index]
                .name
                .cmp(&b.layout.blocks[b.index].name)
        });
        let expected = map.blocks.iter().filter(|(_, p)| p.latest(k).is_some());
        if out.blocks.len() != expected.count() {
            // Not expected: the map was made from these very updates.
            return Err(Error::refused(
                Clause::FrameMissing,
                format!("records[{r}].trajectory.frames[{k}]"),
                "an update the record's map names does not hold its block",
            ));
        }
        Ok(out)
    }

    /// Update `p` of the record whose entry is `entry` (its value given):
    /// its layout (the entry's, when the update repeats a `blocks` text it
    /// knows: then only the rest of the header is decoded), its payload,
    /// and meta, step, time and cell. Paths relative to the frame. An
    /// update decoded in full is checked as the entry's walk checked it.
    fn entry_update<'t>(
        &'t self,
        entry: &RecordEntry,
        p: u64,
        value: &'t [u8],
        meta: Document,
    ) -> Result<(Arc<Layout>, &'t [u8], FrameInfo)> {
        let known = entry.values.get(p as usize).and_then(|v| v.known);
        if let Some((i, rest)) = known {
            if let Some(known) = entry.layouts.get(i as usize) {
                let payload = value
                    .get(value.len() - known.payload_len..)
                    .unwrap_or_default();
                if let Some(info) = decode_rest(value, rest as usize, meta) {
                    return Ok((Arc::clone(&known.layout), payload, info));
                }
            }
        }
        // Not one of the entry's layouts, or a rest of the header the fast
        // path does not take: decoded and checked in full.
        let frame = decode(value)?;
        check_update_blocks(&frame, &self.schema)?;
        let payload = value
            .get(value.len().saturating_sub(payload_len(value))..)
            .unwrap_or_default();
        let layout = layout_of(frame.blocks, payload)?;
        let no_blocks = BTreeMap::new();
        let system = entry.system.as_ref().map_or(&no_blocks, |s| &s.blocks);
        update_rules(&self.schema, &layout, payload, system)?;
        Ok((Arc::new(layout), payload, frame.info))
    }

    /// Record r's entry: the reader's, or made (`RecordTxn::build_entry`,
    /// the locations from the reader's [`FramesTxn`]) and kept.
    fn record_entry(&self, r: u64) -> Result<Arc<RecordEntry>> {
        if let Some(entry) = self.record_cache().get(r) {
            return Ok(entry);
        }
        let mut entry = self.txn()?.build_entry(r)?;
        entry.values = self.value_locations(r, &entry.layouts)?;
        let entry = Arc::new(entry);
        self.record_cache().insert(r, Arc::clone(&entry));
        Ok(entry)
    }

    /// Where each frame of record r is in the reader's [`FramesTxn`] (opened
    /// here the first time), and which of `layouts` it repeats.
    fn value_locations(&self, r: u64, layouts: &[Arc<KnownLayout>]) -> Result<Vec<ValueAt>> {
        let (first, n) = (self.first_frame[r as usize], self.frame_counts[r as usize]);
        let mut frames_txn = self.frames_txn();
        if frames_txn.txn.is_none() {
            let env = self.env.env().clone();
            frames_txn.txn = Some(env.static_read_txn().map_err(lmdb_error)?);
        }
        let Some(txn) = &frames_txn.txn else {
            unreachable!("opened above")
        };
        let lo = frame_key(first);
        let hi = frame_key(first.saturating_add(n));
        let range = self
            .db
            .range(txn, &(Bound::Included(&lo[..]), Bound::Excluded(&hi[..])))
            .map_err(lmdb_error)?;
        let mut values = Vec::with_capacity(n as usize);
        for (k, item) in range.enumerate() {
            let (key, value) = item.map_err(lmdb_error)?;
            if key != frame_key(first + k as u64) {
                break;
            }
            let mut known = None;
            for (i, layout) in layouts.iter().enumerate() {
                if let Some((rest, _)) = same_blocks_at(value, &layout.text, layout.payload_len)? {
                    known = Some((i as u8, rest as u32));
                    break;
                }
            }
            values.push(ValueAt {
                address: value.as_ptr() as usize,
                len: value.len(),
                known,
            });
        }
        if values.len() as u64 != n {
            return Err(Error::refused(
                Clause::FrameMissing,
                format!("records[{r}].trajectory.frames[{}]", values.len()),
                format!("frame key {} is missing", first + values.len() as u64),
            ));
        }
        Ok(values)
    }
}

/// The payload's length of a frame value whose header is sound (what
/// follows the header and its padding), 0 otherwise.
fn payload_len(value: &[u8]) -> usize {
    let header_len = value
        .get(4..8)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let start = (8 + header_len).next_multiple_of(8);
    value.len().saturating_sub(start)
}

/// What [`Reader::frame`] reads before it decodes: frame k of record r,
/// where its cell is, the record's entry and the values of the updates
/// the frame resolves to, with their positions.
struct Fetched<'t> {
    r: u64,
    k: u64,
    cell_at: Option<u64>,
    entry: Arc<RecordEntry>,
    values: Vec<(u64, &'t [u8])>,
}

/// A block of a resolved frame: one block of the layout of the update in
/// effect, and that update's payload.
struct ResolvedBlock<'t> {
    layout: Arc<Layout>,
    index: usize,
    payload: &'t [u8],
    position: u64,
}

impl RecordTxn<'_> {
    /// Record r's system, then a walk of its headers that notes where each
    /// block and the cell are updated and keeps the layouts of its full
    /// updates, checking what the walk checks (bytes, declaration,
    /// per-step keys), `prepare_update`'s rules for every block of every
    /// full update, and the rules of the steps that need no values: steps
    /// increasing, times on every frame or none, one `cell_defined`, one
    /// column set per block.
    fn build_entry(&self, r: u64) -> Result<RecordEntry> {
        let system = self.system(r)?;
        let no_blocks = BTreeMap::new();
        let system_blocks = system.as_ref().map_or(&no_blocks, |s| &s.blocks);
        let schema = &self.reader.schema;
        let frames = self.reader.record_frames(r).unwrap_or(0);
        let mut blocks: BTreeMap<String, (Vec<u64>, Vec<String>)> = BTreeMap::new();
        let mut current: Vec<String> = Vec::new();
        let mut cells = Vec::new();
        let mut layouts: Vec<Arc<KnownLayout>> = Vec::new();
        let mut previous_step = None;
        let mut has_time = None;
        let mut cell_defined = None;
        self.walk_updates(r, None, |u| {
            let step = update_step(&u.info, schema).map_err(|e| u.located(e))?;
            if let Some(prev) = previous_step.filter(|&p| step <= p) {
                return Err(u.located(Error::refused(
                    Clause::StepIncreasing,
                    "step",
                    format!("step {step} after step {prev}: steps must strictly increase"),
                )));
            }
            previous_step = Some(step);
            if *has_time.get_or_insert(u.info.time.is_some()) != u.info.time.is_some() {
                return Err(u.located(Error::refused(
                    Clause::TimeAllOrNone,
                    "time",
                    "time must be on every frame or on none",
                )));
            }
            if let Some(cell) = &u.info.cell {
                let first = *cell_defined.get_or_insert(cell.defined);
                validate::check_cell_defined(Some(cell), Some(first)).map_err(|e| u.located(e))?;
                cells.push(u.k);
            }
            if let Some(full) = u.blocks.take() {
                current.clear();
                for (name, block) in &full {
                    current.push(name.clone());
                    let names = block.columns.keys();
                    match blocks.get(name.as_str()) {
                        Some((_, set)) if !names.clone().eq(set.iter()) => {
                            return Err(u.located(Error::refused(
                                Clause::BlockColumnSetStable,
                                format!("blocks.{name}"),
                                format!(
                                    "columns {:?} differ from this record's earlier update {set:?}",
                                    names.collect::<Vec<_>>()
                                ),
                            )));
                        }
                        Some(_) => {}
                        None => {
                            blocks.insert(name.clone(), (Vec::new(), names.cloned().collect()));
                        }
                    }
                }
                let reusable = blocks_reusable(&full);
                let layout = layout_of(full, u.payload).map_err(|e| u.located(e))?;
                update_rules(schema, &layout, u.payload, system_blocks)
                    .map_err(|e| u.located(e))?;
                let text = blocks_text(u.value).filter(|_| reusable);
                if let Some(text) = text {
                    let known =
                        |l: &Arc<KnownLayout>| l.payload_len == u.payload.len() && *l.text == *text;
                    if layouts.len() < KnownLayout::PER_RECORD && !layouts.iter().any(known) {
                        let shared =
                            self.reader
                                .record_cache()
                                .layout(text, u.payload.len(), || layout);
                        layouts.push(shared);
                    }
                }
            }
            for name in &current {
                if let Some((positions, _)) = blocks.get_mut(name.as_str()) {
                    positions.push(u.k);
                }
            }
            Ok(())
        })?;
        let map = UpdateMap {
            blocks: blocks
                .into_iter()
                .map(|(name, (list, _))| (name, Positions::of(list, frames)))
                .collect(),
            cells: Positions::of(cells, frames),
        };
        let meta_template = schema
            .meta
            .keys()
            .map(|key| (key.clone(), serde_json::Value::Null))
            .collect();
        Ok(RecordEntry {
            map,
            system: system.map(Arc::new),
            layouts,
            meta_template,
            values: Vec::new(),
        })
    }
}

/// `prepare_update`'s rules for every block of a full update but the
/// column set's stability in the record (paths relative to the frame).
fn update_rules(
    schema: &SequenceSchema,
    layout: &Layout,
    payload: &[u8],
    system: &BTreeMap<String, Block>,
) -> Result<()> {
    for block in &layout.blocks {
        let bat = |e: Error| e.within(&format!("blocks.{}", block.name));
        let decl = block_declaration(schema, block).map_err(bat)?;
        block_columns_rules(decl, block, payload, system).map_err(bat)?;
    }
    Ok(())
}

impl Reader {
    /// Bytes the entries of [`Reader::frame`]'s record cache take (as the
    /// cache counts them): a set of shards bounds the sum over its open
    /// shards (`lmdb::Set`).
    pub(crate) fn record_cache_bytes(&self) -> usize {
        self.record_cache().cost
    }

    /// Forgets every record entry of the cache (the next frame of such a
    /// record makes its entry again).
    pub(crate) fn forget_record_entries(&self) {
        let mut cache = self.record_cache();
        cache.entries.clear();
        cache.cost = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_find_the_latest_update() {
        let every = Positions::of(vec![0, 1, 2, 3], 4);
        assert!(matches!(every, Positions::From(0)));
        assert_eq!(every.latest(2), Some(2));
        let late = Positions::of(vec![2, 3], 4);
        assert!(matches!(late, Positions::From(2)));
        assert_eq!(late.latest(1), None);
        assert_eq!(late.latest(3), Some(3));
        let sparse = Positions::of(vec![0, 5, 9], 20);
        assert!(matches!(sparse, Positions::At(_)));
        assert_eq!(sparse.latest(4), Some(0));
        assert_eq!(sparse.latest(5), Some(5));
        assert_eq!(sparse.latest(19), Some(9));
        let none = Positions::of(vec![], 20);
        assert_eq!(none.latest(19), None);
    }
}
