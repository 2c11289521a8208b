//! A full update's layout (its blocks without the payload: names, counts,
//! columns and their offsets) and the read transaction's cache of layouts
//! by `blocks` text, which the resolver and the walk share.

use crate::arrays::BlockHead;
use crate::clause::Clause;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::frame_bytes::{BlockRef, ColumnBytes};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

/// What the resolver keeps of a full update's blocks: everything but the
/// payload, whose bytes it reads at the offsets given. The same `blocks`
/// text (and payload length) makes the same layout, so one layout serves
/// every update that repeats the text, in this record and (through the
/// transaction's [`LayoutCache`]) in later records.
#[derive(Debug)]
pub(super) struct Layout {
    pub(super) blocks: Vec<LayoutBlock>,
}

#[derive(Debug)]
pub(super) struct LayoutBlock {
    pub(super) name: String,
    pub(super) count: u64,
    pub(super) head: BlockHead,
    pub(super) columns: Vec<LayoutColumn>,
}

#[derive(Debug)]
pub(super) struct LayoutColumn {
    pub(super) name: String,
    pub(super) dtype: DType,
    /// The shape after the leading axis (the count).
    pub(super) trailing: Vec<u64>,
    pub(super) precision: Option<f64>,
    pub(super) data: LayoutData,
    /// Offset and length of the mask in the payload.
    pub(super) mask: Option<(usize, usize)>,
}

#[derive(Debug)]
pub(super) enum LayoutData {
    /// Offset and length of the buffer in the payload.
    Buffer(usize, usize),
    /// A string column's values (from the header).
    Strings(Vec<String>),
}

impl Layout {
    /// The layout of decoded `blocks` whose buffers lie in `payload`;
    /// `None` if one does not (not expected: the decoder takes them from
    /// it).
    pub(super) fn of(blocks: BTreeMap<String, BlockRef<'_>>, payload: &[u8]) -> Option<Layout> {
        let at = |bytes: &[u8]| -> Option<(usize, usize)> {
            let offset = (bytes.as_ptr() as usize).checked_sub(payload.as_ptr() as usize)?;
            (offset.checked_add(bytes.len())? <= payload.len()).then_some((offset, bytes.len()))
        };
        let mut out = Vec::with_capacity(blocks.len());
        for (name, block) in blocks {
            let mut columns = Vec::with_capacity(block.columns.len());
            for (col, column) in block.columns {
                let mut shape = column.shape;
                shape.remove(0);
                columns.push(LayoutColumn {
                    name: col,
                    dtype: column.dtype,
                    trailing: shape,
                    precision: column.precision,
                    data: match column.data {
                        ColumnBytes::Buffer(bytes) => {
                            let (o, len) = at(bytes)?;
                            LayoutData::Buffer(o, len)
                        }
                        ColumnBytes::Strings(values) => LayoutData::Strings(values),
                    },
                    mask: match column.validity {
                        Some(mask) => Some(at(mask)?),
                        None => None,
                    },
                });
            }
            out.push(LayoutBlock {
                name,
                count: block.count,
                head: BlockHead {
                    structural_shape: block.structural_shape,
                    targets: block.targets,
                    attributes: block.attributes,
                },
                columns,
            });
        }
        Some(Layout { blocks: out })
    }
}

/// Layouts of the full updates a read transaction met, by `blocks` text
/// and payload length: the first update of a record usually has an earlier
/// record's text (the same blocks, columns and row counts). A text is kept
/// the second time it is met, so a file whose every record is laid out
/// differently costs only the check; at most [`LayoutCache::CAPACITY`]
/// are kept (all forgotten when it is full).
#[derive(Debug, Default)]
pub(super) struct LayoutCache {
    /// By text, then by payload length. foldhash, not the standard
    /// library's SipHash: a text of a few hundred bytes is hashed once per
    /// record, and SipHash took about 1,150 instructions for 330 bytes,
    /// foldhash about 200. The texts come from the file, so a hostile one
    /// could make them collide; `CAPACITY` bounds what that costs.
    pub(super) layouts: HashMap<Box<[u8]>, Vec<SizedLayout>, TextHasher>,
    pub(super) kept: usize,
    /// The hashes of the (payload length, text) pairs met once.
    pub(super) seen: HashSet<u64, TextHasher>,
    /// How many updates found their layout here.
    pub(super) hits: u64,
}

/// A layout and the payload length it was made for.
type SizedLayout = (usize, Arc<Layout>);

/// The hasher of [`LayoutCache`]'s texts (seeded per process).
type TextHasher = foldhash::fast::RandomState;

impl LayoutCache {
    const CAPACITY: usize = 1024;

    /// The layout kept for this text and payload length.
    pub(super) fn get(&mut self, text: &[u8], payload_len: usize) -> Option<Arc<Layout>> {
        if self.kept == 0 {
            return None;
        }
        let kept = self.layouts.get(text)?;
        let layout = kept
            .iter()
            .find(|(len, _)| *len == payload_len)
            .map(|(_, layout)| Arc::clone(layout))?;
        self.hits += 1;
        Some(layout)
    }

    /// Offers the layout of a full update with this text (the memo's: the
    /// update reads no payload bytes) for later updates.
    pub(super) fn offer(&mut self, text: &[u8], payload_len: usize, layout: &Arc<Layout>) {
        if self
            .seen
            .insert(self.layouts.hasher().hash_one((payload_len, text)))
        {
            return;
        }
        if self.kept >= Self::CAPACITY {
            self.layouts.clear();
            self.seen.clear();
            self.kept = 0;
        }
        let kept = self.layouts.entry(Box::from(text)).or_default();
        if kept.iter().all(|(len, _)| *len != payload_len) {
            kept.push((payload_len, Arc::clone(layout)));
            self.kept += 1;
        }
    }
}

/// [`Layout::of`], refused (not expected) when a buffer lies outside the
/// payload.
pub(super) fn layout_of(blocks: BTreeMap<String, BlockRef<'_>>, payload: &[u8]) -> Result<Layout> {
    Layout::of(blocks, payload).ok_or_else(|| {
        Error::refused(
            Clause::FrameBufferBounds,
            "",
            "a buffer lies outside the payload",
        )
    })
}
