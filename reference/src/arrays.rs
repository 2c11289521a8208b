//! A record read column-wise: its trajectory resolved into one array per
//! column for the whole trajectory, the shape a training loader batches.
//!
//! The model's [`Trajectory`] holds one [`Step`] per frame, each with its own
//! blocks and columns: plain, but a few dozen allocations per frame.
//! [`TrajectoryArrays`] holds the same content as one array per column: the
//! rows of every update of a block appended in order, and for each frame the
//! update in effect there (DIGEST §9: present, empty or absent). A block
//! carried forward is not copied: the frames that carry it point at the same
//! update. [`RecordArrays::into_record`] turns it into the model, which is
//! how `RecordTxn::record` reads.

use crate::dtype::DType;
use crate::model::*;
use crate::typed_json::{self, MetaTag, Scalar};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Range;

/// A record with its trajectory resolved column-wise.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RecordArrays {
    /// The record's meta document.
    pub meta: Document,
    /// Topology and constant state (checked by the model rules).
    pub system: Option<Frame>,
    /// Per-step state, one array per column.
    pub trajectory: Option<TrajectoryArrays>,
}

/// A trajectory resolved column-wise: `len()` frames.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct TrajectoryArrays {
    /// The step number of each frame.
    pub steps: Vec<i64>,
    /// The time of each frame, when the trajectory has times.
    pub times: Option<Vec<f64>>,
    /// Every declared per-step key, one value per frame.
    pub meta: BTreeMap<String, StepSeries>,
    /// Every block present or empty at some frame.
    pub blocks: BTreeMap<String, BlockSeries>,
    /// Each cell the trajectory stores, in order.
    pub cells: Vec<Cell>,
    /// For each frame, the cell in effect (an index into `cells`), or `None`
    /// before the first one.
    pub frame_cells: Vec<Option<u32>>,
}

/// One per-step meta key through the frames.
#[derive(Clone, Debug, PartialEq)]
pub enum StepSeries {
    /// A key of any tag but `json`: the tag's scalars, flat, one per frame
    /// (three, six or nine per frame for a vector tag). `bool`/`bool3` are
    /// [`ColumnData::Bool`], `f64`..`f64x9` [`ColumnData::F64`], and so on.
    Typed {
        /// The declared tag.
        tag: MetaTag,
        /// The values of every frame.
        values: ColumnData,
    },
    /// A `json` key: one document per frame.
    Json(Vec<Value>),
}

/// A block through the frames: its updates and the one in effect at each frame.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BlockSeries {
    /// Each update of the block, in frame order.
    pub updates: Vec<BlockUpdate>,
    /// What the updates' headers say besides their row counts: each entry
    /// holds from the update it names (an index into `updates`, ascending,
    /// the first one 0) until the next entry.
    pub heads: Vec<(u32, BlockHead)>,
    /// For each frame, the update in effect (an index into `updates`), or
    /// `None` while the block is absent.
    pub frame_updates: Vec<Option<u32>>,
    /// The columns: the rows of every update, concatenated.
    pub columns: BTreeMap<String, ColumnSeries>,
}

/// One update of a block: which rows of the column arrays it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BlockUpdate {
    /// Rows (0 for an update that empties the block).
    pub count: u64,
    /// The update's first row in its block's column arrays.
    pub first_row: u64,
}

/// What a block update's header says besides its row count (most often
/// nothing, and the same for every update of a record).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BlockHead {
    /// The structural shape, if the header carries one.
    pub structural_shape: Option<Vec<u64>>,
    /// Row-reference targets of the header.
    pub targets: BTreeMap<String, String>,
    /// Attributes of the header.
    pub attributes: Document,
}

/// One column of a block: the rows of every update, concatenated.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnSeries {
    /// Per-row structure (the shape after the leading axis).
    pub trailing: Vec<u64>,
    /// Flat, row-major values of every row of every update.
    pub data: ColumnData,
    /// The masks of the updates that have one (not every row valid), by
    /// update index, ascending: one bool per row of the update, true =
    /// valid. Every row of any other update is valid.
    pub masks: Vec<(u32, Vec<bool>)>,
}

impl RecordArrays {
    /// The same record in the model: one resolved [`Step`] per frame.
    pub fn into_record(self) -> Record {
        Record {
            meta: self.meta,
            system: self.system,
            trajectory: self.trajectory.map(|t| t.to_trajectory()),
        }
    }
}

impl TrajectoryArrays {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether the trajectory has no frames.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The cell in effect at `frame`.
    pub fn cell_at(&self, frame: usize) -> Option<&Cell> {
        let i = (*self.frame_cells.get(frame)?)?;
        self.cells.get(i as usize)
    }

    /// The same trajectory in the model: every frame resolved (its blocks
    /// present or empty there, its meta in canonical typed JSON, the cell in
    /// effect), no declaration of its own.
    pub fn to_trajectory(&self) -> Trajectory {
        let frames = (0..self.len())
            .map(|k| Step {
                step: self.steps[k],
                time: self.times.as_ref().and_then(|t| t.get(k).copied()),
                meta: self
                    .meta
                    .iter()
                    .filter_map(|(key, series)| Some((key.clone(), series.value_at(k)?)))
                    .collect(),
                blocks: self
                    .blocks
                    .iter()
                    .filter_map(|(name, series)| Some((name.clone(), series.block_at(k)?)))
                    .collect(),
                cell: self.cell_at(k).copied(),
            })
            .collect();
        Trajectory {
            schema: None,
            frames,
        }
    }
}

impl StepSeries {
    /// An empty series for a key of `tag`.
    pub fn new(tag: MetaTag) -> StepSeries {
        match series_dtype(tag) {
            Some(dtype) => StepSeries::Typed {
                tag,
                values: ColumnData::empty(dtype),
            },
            None => StepSeries::Json(Vec::new()),
        }
    }

    /// The `f64` values, one per frame (`width` per frame for a vector tag),
    /// when the tag is `f64`, `f64x3`, `f64x6` or `f64x9`.
    pub fn f64s(&self) -> Option<&[f64]> {
        match self {
            StepSeries::Typed {
                values: ColumnData::F64(v),
                ..
            } => Some(v),
            _ => None,
        }
    }

    /// The `f64` values to push onto, for the reader (`f64` tags only).
    pub(crate) fn f64s_mut(&mut self) -> Option<&mut Vec<f64>> {
        match self {
            StepSeries::Typed {
                tag: MetaTag::F64,
                values: ColumnData::F64(v),
            } => Some(v),
            _ => None,
        }
    }

    /// Appends one frame's value, which must fit the tag (the reader checks
    /// it first); the error says what does not fit.
    pub fn push(&mut self, value: &Value) -> Result<(), String> {
        // The common case, without the tag's shape.
        if let (
            StepSeries::Typed {
                tag: MetaTag::F64,
                values: ColumnData::F64(out),
            },
            Value::Number(n),
        ) = (&mut *self, value)
        {
            if let Some(x) = n.as_f64() {
                out.push(x);
                return Ok(());
            }
        }
        match self {
            StepSeries::Json(values) => {
                values.push(value.clone());
                Ok(())
            }
            StepSeries::Typed { tag, values } => {
                let (scalar, width) = tag.shape();
                match (width, value) {
                    (None, v) => push_scalar(values, scalar, v),
                    (Some(n), Value::Array(items)) if items.len() == n => items
                        .iter()
                        .try_for_each(|v| push_scalar(values, scalar, v)),
                    (Some(n), other) => Err(format!(
                        "expected an array of {n} for tag {}, got {}",
                        tag.name(),
                        typed_json::brief(other)
                    )),
                }
            }
        }
    }

    /// Frame `k`'s value in canonical typed JSON; `None` past the values
    /// pushed.
    pub fn value_at(&self, k: usize) -> Option<Value> {
        match self {
            StepSeries::Json(values) => values.get(k).cloned(),
            StepSeries::Typed { tag, values } => match tag.shape().1 {
                None => scalar_json(values, k),
                Some(n) => (k * n..(k + 1) * n)
                    .map(|i| scalar_json(values, i))
                    .collect::<Option<Vec<Value>>>()
                    .map(Value::Array),
            },
        }
    }
}

/// The column dtype holding a tag's scalars; `None` for `json`.
fn series_dtype(tag: MetaTag) -> Option<DType> {
    Some(match tag.shape().0 {
        Scalar::Bool => DType::Bool,
        Scalar::F64 => DType::F64,
        Scalar::String => DType::String,
        Scalar::Json => return None,
        Scalar::Int(..) => match tag {
            MetaTag::I32 | MetaTag::I32x3 => DType::I32,
            MetaTag::I64 | MetaTag::I64x3 => DType::I64,
            MetaTag::U32 | MetaTag::U32x3 => DType::U32,
            _ => DType::U64,
        },
    })
}

fn push_scalar(values: &mut ColumnData, scalar: Scalar, v: &Value) -> Result<(), String> {
    let int = || -> Result<i128, String> {
        let n = typed_json::int_from_json(v)?;
        match scalar {
            Scalar::Int(min, max) if n < min || n > max => {
                Err(format!("integer {n} out of range {min}..={max}"))
            }
            _ => Ok(n),
        }
    };
    // The ranges were checked by `int`: the casts are exact.
    match (values, v) {
        (ColumnData::Bool(out), Value::Bool(b)) => out.push(*b),
        (ColumnData::String(out), Value::String(s)) => out.push(s.clone()),
        (ColumnData::F64(out), v) => out.push(typed_json::f64_from_json(v)?),
        (ColumnData::I32(out), _) => out.push(int()? as i32),
        (ColumnData::I64(out), _) => out.push(int()? as i64),
        (ColumnData::U32(out), _) => out.push(int()? as u32),
        (ColumnData::U64(out), _) => out.push(int()? as u64),
        (_, other) => return Err(format!("{} does not fit", typed_json::brief(other))),
    }
    Ok(())
}

/// Element `i` of a step series' values in canonical typed JSON; `None`
/// past the end, or for a dtype no tag maps to.
fn scalar_json(values: &ColumnData, i: usize) -> Option<Value> {
    Some(match values {
        ColumnData::Bool(v) => Value::Bool(*v.get(i)?),
        ColumnData::String(v) => Value::String(v.get(i)?.clone()),
        ColumnData::F64(v) => typed_json::f64_to_json(*v.get(i)?),
        ColumnData::I32(v) => typed_json::int_to_json((*v.get(i)?).into()),
        ColumnData::I64(v) => typed_json::int_to_json((*v.get(i)?).into()),
        ColumnData::U32(v) => typed_json::int_to_json((*v.get(i)?).into()),
        ColumnData::U64(v) => typed_json::int_to_json((*v.get(i)?).into()),
        _ => return None,
    })
}

impl BlockSeries {
    /// The update in effect at `frame`, if the block is present or empty there.
    pub fn update_at(&self, frame: usize) -> Option<&BlockUpdate> {
        let u = (*self.frame_updates.get(frame)?)?;
        self.updates.get(u as usize)
    }

    /// The values of an `f64` column at `frame`, flat and row-major: `None`
    /// when the block is absent there or the column is not an `f64` one.
    pub fn f64_at(&self, column: &str, frame: usize) -> Option<&[f64]> {
        let update = self.update_at(frame)?;
        let column = self.columns.get(column)?;
        let ColumnData::F64(values) = &column.data else {
            return None;
        };
        values.get(column.elements(update))
    }

    /// The header of update `u` (empty when `heads` says nothing for it).
    pub fn head(&self, u: u32) -> Option<&BlockHead> {
        let i = self.heads.partition_point(|(from, _)| *from <= u);
        Some(&self.heads.get(i.checked_sub(1)?)?.1)
    }

    /// The block at `frame` in the model, its columns copied out.
    pub fn block_at(&self, frame: usize) -> Option<Block> {
        let u = (*self.frame_updates.get(frame)?)?;
        let update = self.updates.get(u as usize)?;
        let columns = self
            .columns
            .iter()
            .map(|(name, column)| (name.clone(), column.column(u, update)))
            .collect();
        let head = self.head(u).cloned().unwrap_or_default();
        Some(Block {
            count: update.count,
            columns,
            structural_shape: head.structural_shape,
            targets: head.targets,
            attributes: head.attributes,
        })
    }
}

impl ColumnSeries {
    /// An empty column of `dtype` with per-row structure `trailing`.
    pub fn new(dtype: DType, trailing: Vec<u64>) -> ColumnSeries {
        ColumnSeries {
            trailing,
            data: ColumnData::empty(dtype),
            masks: Vec::new(),
        }
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Elements per row: the product of `trailing` (saturating; the
    /// reader's shapes never overflow).
    pub fn row_width(&self) -> usize {
        self.trailing
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(usize::try_from(b).ok()?))
            .unwrap_or(usize::MAX)
    }

    /// Where `update`'s elements are in `data`.
    pub fn elements(&self, update: &BlockUpdate) -> Range<usize> {
        let width = self.row_width();
        let at = |row: u64| usize::try_from(row).map_or(usize::MAX, |r| r.saturating_mul(width));
        at(update.first_row)..at(update.first_row.saturating_add(update.count))
    }

    /// The mask of update `u` (index into its block's `updates`), `None`
    /// when every row is valid.
    pub fn mask(&self, u: u32) -> Option<&[bool]> {
        let i = self.masks.binary_search_by_key(&u, |(k, _)| *k).ok()?;
        Some(&self.masks[i].1)
    }

    /// Update `u`'s rows as a model column: shape `[count, trailing..]`, no
    /// precision (a trajectory column takes its precision from the
    /// declaration).
    pub fn column(&self, u: u32, update: &BlockUpdate) -> Column {
        let mut shape = Vec::with_capacity(1 + self.trailing.len());
        shape.push(update.count);
        shape.extend_from_slice(&self.trailing);
        Column {
            shape,
            data: self.data.slice(self.elements(update)),
            validity: self.mask(u).map(<[bool]>::to_vec),
            precision: None,
        }
    }
}

impl ColumnData {
    /// A copy of elements `range` (clamped to the values there are).
    pub fn slice(&self, range: Range<usize>) -> ColumnData {
        fn part<T: Clone>(v: &[T], r: &Range<usize>) -> Vec<T> {
            let end = r.end.min(v.len());
            v.get(r.start.min(end)..end).unwrap_or_default().to_vec()
        }
        match self {
            ColumnData::F64(v) => ColumnData::F64(part(v, &range)),
            ColumnData::I8(v) => ColumnData::I8(part(v, &range)),
            ColumnData::I16(v) => ColumnData::I16(part(v, &range)),
            ColumnData::I32(v) => ColumnData::I32(part(v, &range)),
            ColumnData::I64(v) => ColumnData::I64(part(v, &range)),
            ColumnData::U8(v) => ColumnData::U8(part(v, &range)),
            ColumnData::U16(v) => ColumnData::U16(part(v, &range)),
            ColumnData::U32(v) => ColumnData::U32(part(v, &range)),
            ColumnData::U64(v) => ColumnData::U64(part(v, &range)),
            ColumnData::Bool(v) => ColumnData::Bool(part(v, &range)),
            ColumnData::String(v) => ColumnData::String(part(v, &range)),
            ColumnData::C64(v) => ColumnData::C64(part(v, &range)),
            ColumnData::C128(v) => ColumnData::C128(part(v, &range)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What a series hands back is what `typed_json::normalize` makes of
    /// what was pushed, for every tag.
    #[test]
    fn step_values_come_back_canonical() {
        let cases = [
            (MetaTag::Bool, json!(true)),
            (MetaTag::I32, json!(-7)),
            (MetaTag::I64, json!("-9223372036854775808")),
            (MetaTag::I64, json!(9007199254740993i64)),
            (MetaTag::U32, json!(4294967295u64)),
            (MetaTag::U64, json!(18446744073709551615u64)),
            (MetaTag::F64, json!(-503.25)),
            (MetaTag::F64, json!("NaN")),
            (MetaTag::F64, json!("-Infinity")),
            (MetaTag::F64, json!(3)),
            (MetaTag::String, json!("ab\"c")),
            (MetaTag::Json, json!({"a": [1, null]})),
            (MetaTag::Bool3, json!([true, false, true])),
            (MetaTag::I32x3, json!([1, -2, 3])),
            (MetaTag::I64x3, json!([1, "-9007199254740993", 3])),
            (MetaTag::U32x3, json!([1, 2, 3])),
            (MetaTag::U64x3, json!(["18446744073709551615", 0, 1])),
            (MetaTag::F64x3, json!([1, "Infinity", -0.0])),
            (MetaTag::F64x6, json!([1, 2, 3, 4, 5, 6.5])),
            (MetaTag::F64x9, json!([1, 2, 3, 4, 5, 6, 7, 8, 9])),
        ];
        for (tag, value) in cases {
            let mut series = StepSeries::new(tag);
            series.push(&value).unwrap();
            series.push(&value).unwrap();
            let want = typed_json::normalize(tag, &value).unwrap();
            assert_eq!(series.value_at(1), Some(want), "{tag:?} {value}");
            assert_eq!(series.value_at(2), None);
        }
    }

    #[test]
    fn step_values_that_do_not_fit_are_refused() {
        for (tag, value) in [
            (MetaTag::I32, json!(4294967296u64)),
            (MetaTag::U64, json!(-1)),
            (MetaTag::I64, json!(1.5)),
            (MetaTag::F64, json!(null)),
            (MetaTag::Bool, json!(1)),
            (MetaTag::F64x3, json!([1, 2])),
            (MetaTag::String, json!(3)),
        ] {
            assert!(
                StepSeries::new(tag).push(&value).is_err(),
                "{tag:?} {value}"
            );
        }
    }

    #[test]
    fn frames_resolve_to_their_update() {
        let mut x = ColumnSeries::new(DType::F64, vec![3]);
        x.data = ColumnData::F64((0..9).map(f64::from).collect());
        x.masks = vec![(1, vec![false, true])];
        let series = BlockSeries {
            updates: vec![
                BlockUpdate {
                    count: 1,
                    first_row: 0,
                },
                BlockUpdate {
                    count: 2,
                    first_row: 1,
                },
                BlockUpdate {
                    count: 0,
                    first_row: 3,
                },
            ],
            heads: vec![
                (0, BlockHead::default()),
                (
                    1,
                    BlockHead {
                        structural_shape: Some(vec![2, 1]),
                        ..BlockHead::default()
                    },
                ),
            ],
            frame_updates: vec![None, Some(0), Some(0), Some(1), Some(2)],
            columns: BTreeMap::from([("x".to_string(), x)]),
        };
        assert!(series.block_at(0).is_none());
        assert_eq!(series.f64_at("x", 2), Some(&[0.0, 1.0, 2.0][..]));
        assert_eq!(
            series.f64_at("x", 3),
            Some(&[3.0, 4.0, 5.0, 6.0, 7.0, 8.0][..])
        );
        let at3 = series.block_at(3).unwrap();
        assert_eq!(at3.columns["x"].shape, vec![2, 3]);
        assert_eq!(at3.columns["x"].validity, Some(vec![false, true]));
        assert_eq!(at3.structural_shape, Some(vec![2, 1]));
        assert_eq!(series.block_at(2).unwrap().structural_shape, None);
        assert_eq!(
            series.block_at(4).unwrap().structural_shape,
            Some(vec![2, 1])
        );
        assert_eq!(series.block_at(1).unwrap().columns["x"].validity, None);
        assert_eq!(series.columns["x"].mask(1), Some(&[false, true][..]));
        assert_eq!(series.columns["x"].mask(0), None);
        let empty = series.block_at(4).unwrap();
        assert_eq!(empty.count, 0);
        assert_eq!(empty.columns["x"].shape, vec![0, 3]);
        assert!(empty.columns["x"].data.is_empty());
    }
}
