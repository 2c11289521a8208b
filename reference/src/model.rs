//! The collection model (DIGEST §§5-11), as plain owned data.
//!
//! The same types describe what a writer is handed (a trajectory as frame
//! *presentations*: an omitted block carries forward) and what a reader hands
//! back (every frame *resolved*). A resolved trajectory is also a valid
//! presentation of the same content.

use crate::dtype::DType;
use crate::typed_json::MetaTag;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A JSON object: documents and meta maps.
pub type Document = Map<String, Value>;

/// Column values: one typed vector per dtype, flat and row-major.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum ColumnData {
    F64(Vec<f64>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    /// Interleaved (re, im) of f32.
    C64(Vec<[f32; 2]>),
    /// Interleaved (re, im) of f64.
    C128(Vec<[f64; 2]>),
}

/// Applies `$body` to the vector inside any variant.
macro_rules! with_vec {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            ColumnData::F64($v) => $body,
            ColumnData::I8($v) => $body,
            ColumnData::I16($v) => $body,
            ColumnData::I32($v) => $body,
            ColumnData::I64($v) => $body,
            ColumnData::U8($v) => $body,
            ColumnData::U16($v) => $body,
            ColumnData::U32($v) => $body,
            ColumnData::U64($v) => $body,
            ColumnData::Bool($v) => $body,
            ColumnData::String($v) => $body,
            ColumnData::C64($v) => $body,
            ColumnData::C128($v) => $body,
        }
    };
}
#[allow(unused_imports)]
pub(crate) use with_vec;

impl ColumnData {
    /// The dtype of these values.
    pub fn dtype(&self) -> DType {
        match self {
            ColumnData::F64(_) => DType::F64,
            ColumnData::I8(_) => DType::I8,
            ColumnData::I16(_) => DType::I16,
            ColumnData::I32(_) => DType::I32,
            ColumnData::I64(_) => DType::I64,
            ColumnData::U8(_) => DType::U8,
            ColumnData::U16(_) => DType::U16,
            ColumnData::U32(_) => DType::U32,
            ColumnData::U64(_) => DType::U64,
            ColumnData::Bool(_) => DType::Bool,
            ColumnData::String(_) => DType::String,
            ColumnData::C64(_) => DType::C64,
            ColumnData::C128(_) => DType::C128,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_vec!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An empty vector of `dtype`.
    pub fn empty(dtype: DType) -> ColumnData {
        match dtype {
            DType::F64 => ColumnData::F64(Vec::new()),
            DType::I8 => ColumnData::I8(Vec::new()),
            DType::I16 => ColumnData::I16(Vec::new()),
            DType::I32 => ColumnData::I32(Vec::new()),
            DType::I64 => ColumnData::I64(Vec::new()),
            DType::U8 => ColumnData::U8(Vec::new()),
            DType::U16 => ColumnData::U16(Vec::new()),
            DType::U32 => ColumnData::U32(Vec::new()),
            DType::U64 => ColumnData::U64(Vec::new()),
            DType::Bool => ColumnData::Bool(Vec::new()),
            DType::String => ColumnData::String(Vec::new()),
            DType::C64 => ColumnData::C64(Vec::new()),
            DType::C128 => ColumnData::C128(Vec::new()),
        }
    }

    /// Bit-for-bit equality: a repeated NaN is equal, `-0.0` is not `0.0`.
    pub fn same_bits(&self, other: &ColumnData) -> bool {
        match (self, other) {
            (ColumnData::F64(a), ColumnData::F64(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (ColumnData::C64(a), ColumnData::C64(b)) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| {
                        x[0].to_bits() == y[0].to_bits() && x[1].to_bits() == y[1].to_bits()
                    })
            }
            (ColumnData::C128(a), ColumnData::C128(b)) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| {
                        x[0].to_bits() == y[0].to_bits() && x[1].to_bits() == y[1].to_bits()
                    })
            }
            (a, b) => a == b,
        }
    }

    /// The values as u64 row references, if this is a u64 column.
    pub fn as_u64(&self) -> Option<&[u64]> {
        match self {
            ColumnData::U64(v) => Some(v),
            _ => None,
        }
    }
}

/// A column: values of one dtype, a shape whose leading axis is the block's
/// count, an optional validity mask and an optional declared precision.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// Full shape; `shape[0]` is the block's count.
    pub shape: Vec<u64>,
    /// Flat, row-major values.
    pub data: ColumnData,
    /// One bool per row, true = valid. `None` = every row valid.
    pub validity: Option<Vec<bool>>,
    /// Declared precision (system and index columns only).
    pub precision: Option<f64>,
}

impl Column {
    /// A column without mask or precision.
    pub fn new(shape: Vec<u64>, data: ColumnData) -> Column {
        Column {
            shape,
            data,
            validity: None,
            precision: None,
        }
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Rows (leading axis), 0 for a scalar shape.
    pub fn rows(&self) -> u64 {
        self.shape.first().copied().unwrap_or(0)
    }

    /// Normalizes the mask: all-true and empty masks become `None`.
    pub fn normalize_mask(&mut self) {
        if self.validity.as_ref().is_some_and(|m| m.iter().all(|&b| b)) {
            self.validity = None;
        }
    }

    /// The mask as it is written: none when absent or every row is valid.
    #[inline]
    pub(crate) fn written_mask(&self) -> Option<&[bool]> {
        self.validity.as_deref().filter(|m| !m.iter().all(|&b| b))
    }

    /// Bit-for-bit equality of content (dtype, shape, values, mask, precision).
    pub fn same_bits(&self, other: &Column) -> bool {
        same_short(&self.shape, &other.shape)
            && self.data.same_bits(&other.data)
            && self.written_mask() == other.written_mask()
            && self.precision.map(f64::to_bits) == other.precision.map(f64::to_bits)
    }

    /// Whether `other` is written with the same header entry (precision
    /// aside): the same dtype, shape, length and written mask (a mask is
    /// written unless every row is valid). Never for strings, whose values
    /// are in the header.
    #[inline(always)]
    fn same_layout(&self, other: &Column) -> bool {
        let dtype = self.dtype();
        dtype == other.dtype()
            && dtype != DType::String
            && same_short(&self.shape, &other.shape)
            && self.data.len() == other.data.len()
            && self.written_mask().map(<[bool]>::len) == other.written_mask().map(<[bool]>::len)
    }
}

/// A block: a row count and named columns.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Block {
    /// Rows.
    pub count: u64,
    /// Columns by name.
    pub columns: BTreeMap<String, Column>,
    /// Optional structural shape; its product is `count`.
    pub structural_shape: Option<Vec<u64>>,
    /// Row references declared beyond the endpoint convention: column -> target.
    pub targets: BTreeMap<String, String>,
    /// The block's own attributes (system frames only).
    pub attributes: Document,
}

impl Block {
    /// Bit-for-bit equality (used to decide whether a presentation changes a block).
    pub fn same_bits(&self, other: &Block) -> bool {
        self.same_with_columns(other, Column::same_bits)
    }

    /// Whether two updates of a block are written with the same `blocks`
    /// text (precisions aside), and `also` holds for every pair of their
    /// columns, in one walk: the same count, structural shape, targets and
    /// attributes, and the same columns with the same dtypes, shapes,
    /// lengths and written masks (a mask is written unless every row is
    /// valid). String columns, whose values are in the text, never compare
    /// the same. Validation asks this of every presented block.
    pub(crate) fn same_layout_where(
        &self,
        other: &Block,
        also: impl Fn(&Column, &Column) -> bool,
    ) -> bool {
        self.same_with_columns(other, |a, b| a.same_layout(b) && also(a, b))
    }

    /// [`Block::same_bits`] and the layout of [`Block::same_layout_where`]
    /// in one walk over the columns: the writer asks both of every block it
    /// is presented, against what carries forward.
    pub(crate) fn compare(&self, other: &Block) -> Sameness {
        let (mut bits, mut layout) = (true, true);
        // The walk stops at the first pair for which neither holds.
        let paired = self.same_with_columns(other, |a, b| {
            layout = layout && a.same_layout(b);
            bits = bits && a.same_bits(b);
            bits || layout
        });
        Sameness {
            bits: paired && bits,
            layout: paired && layout,
        }
    }

    /// The same count, structural shape, targets and attributes, and
    /// columns of the same names that pair up under `same`.
    fn same_with_columns(
        &self,
        other: &Block,
        mut same: impl FnMut(&Column, &Column) -> bool,
    ) -> bool {
        // Asked of every presented block, by validation and by the
        // writer: empty maps and short names are compared inline rather
        // than through the maps' `==` and `memcmp` (together half of the
        // comparison's cost).
        self.count == other.count
            && self.structural_shape == other.structural_shape
            && ((self.targets.is_empty() && other.targets.is_empty())
                || self.targets == other.targets)
            && ((self.attributes.is_empty() && other.attributes.is_empty())
                || self.attributes == other.attributes)
            && self.columns.len() == other.columns.len()
            && self
                .columns
                .iter()
                .zip(&other.columns)
                .all(|((ka, a), (kb, b))| same_short(ka.as_bytes(), kb.as_bytes()) && same(a, b))
    }
}

/// A presented block against what carries forward ([`Block::compare`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sameness {
    /// The same bit for bit: nothing to write.
    pub bits: bool,
    /// Laid out the same: written with the same `blocks` text.
    pub layout: bool,
}

/// Slice equality as a plain loop: for the few items of a column name or
/// a shape, cheaper than the call to `memcmp` that `==` makes.
#[inline(always)]
fn same_short<T: PartialEq>(a: &[T], b: &[T]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A cell (DIGEST §8): lattice vectors are the columns of `vectors`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// 3x3 row-major.
    pub vectors: [f64; 9],
    /// Origin.
    pub origin: [f64; 3],
    /// Periodicity per axis.
    pub boundary: [bool; 3],
    /// Whether a cell is defined at all.
    pub defined: bool,
}

impl Cell {
    /// The identity matrix.
    pub const IDENTITY: [f64; 9] = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];

    /// An undefined cell at the default origin, as stored and read back
    /// (an undefined cell keeps whatever origin it has).
    pub const UNDEFINED: Cell = Cell {
        vectors: Cell::IDENTITY,
        origin: [0.0; 3],
        boundary: [false; 3],
        defined: false,
    };

    /// Bit-for-bit equality.
    pub fn same_bits(&self, other: &Cell) -> bool {
        self.vectors
            .iter()
            .zip(&other.vectors)
            .all(|(a, b)| a.to_bits() == b.to_bits())
            && self
                .origin
                .iter()
                .zip(&other.origin)
                .all(|(a, b)| a.to_bits() == b.to_bits())
            && self.boundary == other.boundary
            && self.defined == other.defined
    }
}

/// A frame standing alone: a system, or a force field (`meta_types` empty).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Frame {
    /// Meta values in canonical typed JSON.
    pub meta: Document,
    /// The tag of every meta key.
    pub meta_types: BTreeMap<String, MetaTag>,
    /// Blocks by name.
    pub blocks: BTreeMap<String, Block>,
    /// The cell, if any.
    pub cell: Option<Cell>,
}

/// One ordinal of a trajectory.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Step {
    /// Step number, strictly increasing.
    pub step: i64,
    /// Time, on every frame or none.
    pub time: Option<f64>,
    /// Per-step meta in canonical typed JSON, typed by the declaration.
    pub meta: Document,
    /// Blocks presented (writer side) or resolved (reader side).
    pub blocks: BTreeMap<String, Block>,
    /// The cell presented (writer) or in effect (reader).
    pub cell: Option<Cell>,
}

/// A record's trajectory.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Trajectory {
    /// The record's own declaration, when it states one.
    pub schema: Option<SequenceSchema>,
    /// The frames in order.
    pub frames: Vec<Step>,
}

/// A record: meta, and at least one of system and trajectory.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Record {
    /// The record's meta document (plain JSON).
    pub meta: Document,
    /// Topology and constant state.
    pub system: Option<Frame>,
    /// Per-step state.
    pub trajectory: Option<Trajectory>,
}

/// A declared trajectory column.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDecl {
    /// Dtype.
    pub dtype: DType,
    /// Per-row structure.
    pub trailing: Vec<u64>,
    /// Whether a mask may occur.
    pub nullable: bool,
    /// Declared precision.
    pub precision: Option<f64>,
}

/// A declared trajectory block.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BlockDecl {
    /// Columns.
    pub columns: BTreeMap<String, ColumnDecl>,
    /// Fixed structure.
    pub structural_shape: Option<Vec<u64>>,
    /// Row references.
    pub targets: BTreeMap<String, String>,
    /// The block this one is row-aligned with.
    pub aligned_with: Option<String>,
}

/// A declared per-step meta key.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaDecl {
    /// Its tag.
    pub tag: MetaTag,
    /// Its fill, if it has one (`Some(Value::Null)` is a null fill, json only).
    pub fill: Option<Value>,
}

/// The one trajectory declaration of a collection.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SequenceSchema {
    /// Declared blocks.
    pub blocks: BTreeMap<String, BlockDecl>,
    /// Declared per-step meta keys.
    pub meta: BTreeMap<String, MetaDecl>,
}

/// The collection-wide force field: a document and one table per style.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ForceField {
    /// The force-field document (plain JSON).
    pub document: Document,
    /// Style tables, by encoded block name.
    pub tables: BTreeMap<String, Block>,
}

/// What a collection has besides its records: everything `meta` and the
/// index need, known before the first record is written.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Header {
    /// The collection document (`units`, provenance, ...).
    pub meta: Document,
    /// The declaration, or `None` to derive it from the records.
    pub sequence_schema: Option<SequenceSchema>,
    /// The force field, if any.
    pub forcefield: Option<ForceField>,
}

/// A whole collection in memory.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Collection {
    /// Document, declaration, force field.
    pub header: Header,
    /// The collection's own index columns, one row per record.
    pub index: BTreeMap<String, Column>,
    /// Records in order.
    pub records: Vec<Record>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(columns: &[(&str, Column)]) -> Block {
        Block {
            count: 2,
            columns: columns
                .iter()
                .map(|(name, c)| (name.to_string(), c.clone()))
                .collect(),
            ..Block::default()
        }
    }

    /// `compare` answers in one walk what `same_bits` and
    /// `same_layout_where` answer in two, for blocks that differ in each
    /// way a presented block can differ from what carries forward.
    #[test]
    fn compare_is_same_bits_and_same_layout_at_once() {
        let f64s = |v: [f64; 2]| Column::new(vec![2], ColumnData::F64(v.to_vec()));
        let strs = |v: [&str; 2]| {
            Column::new(
                vec![2],
                ColumnData::String(v.iter().map(|s| s.to_string()).collect()),
            )
        };
        let masked = |c: Column, m: [bool; 2]| Column {
            validity: Some(m.to_vec()),
            ..c
        };
        let base = block(&[("x", f64s([1.0, 2.0])), ("y", f64s([3.0, 4.0]))]);
        let mut recounted = base.clone();
        recounted.count = 3;
        let mut shaped = base.clone();
        shaped.structural_shape = Some(vec![2]);
        let others = [
            base.clone(),
            block(&[("x", f64s([1.0, 2.0])), ("y", f64s([3.0, 5.0]))]),
            block(&[("x", f64s([9.0, 2.0])), ("y", f64s([3.0, 4.0]))]),
            block(&[("x", f64s([1.0, 2.0])), ("z", f64s([3.0, 4.0]))]),
            block(&[("x", f64s([1.0, 2.0]))]),
            block(&[
                ("x", f64s([1.0, 2.0])),
                (
                    "y",
                    Column::new(vec![2, 1], ColumnData::F64(vec![3.0, 4.0])),
                ),
            ]),
            block(&[
                ("x", f64s([1.0, 2.0])),
                ("y", Column::new(vec![2], ColumnData::I64(vec![3, 4]))),
            ]),
            block(&[
                ("x", f64s([1.0, 2.0])),
                ("y", masked(f64s([3.0, 4.0]), [true, true])),
            ]),
            block(&[
                ("x", f64s([1.0, 2.0])),
                ("y", masked(f64s([3.0, 4.0]), [true, false])),
            ]),
            block(&[("x", f64s([1.0, 2.0])), ("y", f64s([3.0, -0.0]))]),
            recounted,
            shaped,
        ];
        let with_strings = block(&[("e", strs(["C", "H"])), ("x", f64s([1.0, 2.0]))]);
        let string_others = [
            with_strings.clone(),
            block(&[("e", strs(["C", "O"])), ("x", f64s([1.0, 2.0]))]),
            block(&[("e", strs(["C", "H"])), ("x", f64s([1.0, 7.0]))]),
        ];
        let pairs = others
            .iter()
            .map(|o| (&base, o))
            .chain(string_others.iter().map(|o| (&with_strings, o)));
        let mut seen = BTreeMap::new();
        for (i, (a, b)) in pairs.enumerate() {
            let want = Sameness {
                bits: a.same_bits(b),
                layout: a.same_layout_where(b, |_, _| true),
            };
            assert_eq!(a.compare(b), want, "pair {i}: {b:?}");
            *seen.entry((want.bits, want.layout)).or_insert(0) += 1;
        }
        // Every combination of the two answers occurs among the pairs.
        assert_eq!(seen.len(), 4, "{seen:?}");
    }
}
