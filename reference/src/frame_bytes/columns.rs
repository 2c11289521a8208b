//! Reading columns out of a decoded frame: copies into owned columns and
//! in-place views where the address allows.

use super::*;

/// Appends `N`-byte little-endian items (works at any address; a trailing
/// partial item is ignored). On a little-endian target the bytes already
/// are the items' memory and are copied in one go.
#[inline]
pub(super) fn extend<T: PlainOld, const N: usize>(
    out: &mut Vec<T>,
    bytes: &[u8],
    item: impl Fn([u8; N]) -> T,
) {
    let (items, _) = bytes.as_chunks::<N>();
    if cfg!(target_endian = "little") && std::mem::size_of::<T>() == N {
        out.reserve(items.len());
        // SAFETY: `reserve` made room for `items.len()` more `T`s after the
        // `out.len()` initialized ones. The source is `items.len() * N`
        // bytes of `bytes`, valid for reads; the destination is spare
        // capacity of `out`, valid for writes and not overlapping a
        // borrowed slice. `T: PlainOld` is `N` bytes without padding and
        // valid for every bit pattern, and on a little-endian target its
        // memory is its little-endian encoding: after the copy the new
        // items are initialized values, so the length may include them.
        unsafe {
            let end = out.as_mut_ptr().add(out.len());
            std::ptr::copy_nonoverlapping(
                items.as_ptr().cast::<u8>(),
                end.cast::<u8>(),
                items.len() * N,
            );
            out.set_len(out.len() + items.len());
        }
    } else {
        out.extend(items.iter().map(|&a| item(a)));
    }
}

pub(super) fn extend_bools(out: &mut Vec<bool>, bytes: &[u8], what: &str) -> Result<()> {
    if let Some(b) = bytes.iter().find(|&&b| b > 1) {
        return Err(Error::refused(
            Clause::TypedValue,
            "",
            format!("{what} holds the byte {b}, not 0 / 1"),
        ));
    }
    out.extend(bytes.iter().map(|&b| b == 1));
    Ok(())
}

/// Appends a buffer's little-endian items to `out` (its dtype says how
/// many bytes an item has; a trailing partial item is ignored). Refuses a
/// bool byte other than 0 / 1; appends nothing for a string column.
/// Inlined where the reader copies a frame's columns (most of what it does
/// with a frame), so that each arm's copy is inlined too.
#[inline(always)]
pub(crate) fn extend_buffer(out: &mut ColumnData, b: &[u8]) -> Result<()> {
    match out {
        ColumnData::F64(v) => extend(v, b, f64::from_le_bytes),
        ColumnData::I8(v) => extend(v, b, i8::from_le_bytes),
        ColumnData::I16(v) => extend(v, b, i16::from_le_bytes),
        ColumnData::I32(v) => extend(v, b, i32::from_le_bytes),
        ColumnData::I64(v) => extend(v, b, i64::from_le_bytes),
        ColumnData::U8(v) => v.extend_from_slice(b),
        ColumnData::U16(v) => extend(v, b, u16::from_le_bytes),
        ColumnData::U32(v) => extend(v, b, u32::from_le_bytes),
        ColumnData::U64(v) => extend(v, b, u64::from_le_bytes),
        ColumnData::Bool(v) => extend_bools(v, b, "a bool buffer")?,
        ColumnData::C64(v) => extend(v, b, |c: [u8; 8]| {
            [
                f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                f32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            ]
        }),
        ColumnData::C128(v) => extend(v, b, |c: [u8; 16]| {
            let (re, im) = c.split_at(8);
            let mut r = [0; 8];
            let mut i = [0; 8];
            r.copy_from_slice(re);
            i.copy_from_slice(im);
            [f64::from_le_bytes(r), f64::from_le_bytes(i)]
        }),
        ColumnData::String(_) => {}
    }
    Ok(())
}

/// The element types a buffer may be viewed as in place or copied into in
/// one go: [`Plain`] (no padding), and every bit pattern of
/// `size_of::<Self>()` bytes is a valid value (so not `bool`). Private: no
/// other type can be added.
///
/// # Safety
///
/// An implementor must be `Plain` and valid for every bit pattern.
pub(super) unsafe trait PlainOld: Plain {}
// SAFETY: every bit pattern of a float or an integer is a valid value; an
// array of such values has no padding and no invalid patterns either.
unsafe impl PlainOld for f64 {}
// SAFETY: as above.
unsafe impl PlainOld for i8 {}
// SAFETY: as above.
unsafe impl PlainOld for i16 {}
// SAFETY: as above.
unsafe impl PlainOld for i32 {}
// SAFETY: as above.
unsafe impl PlainOld for i64 {}
// SAFETY: as above.
unsafe impl PlainOld for u16 {}
// SAFETY: as above.
unsafe impl PlainOld for u32 {}
// SAFETY: as above.
unsafe impl PlainOld for u64 {}
// SAFETY: as above.
unsafe impl PlainOld for [f32; 2] {}
// SAFETY: as above.
unsafe impl PlainOld for [f64; 2] {}

impl<'a> ColumnRef<'a> {
    /// An owned copy of the column. Works at any address (no alignment
    /// needed); checks that bool values and mask bytes are 0 / 1 and that
    /// the buffer and mask lengths fit the shape; an all-true (or empty) mask
    /// becomes `None`.
    pub fn to_column(&self) -> Result<Column> {
        self.clone().into_column()
    }

    /// [`ColumnRef::to_column`], moving the shape and string values instead
    /// of copying them.
    pub fn into_column(mut self) -> Result<Column> {
        let mut data = ColumnData::empty(self.dtype);
        self.append_to(&mut data)?;
        let validity = self.mask()?;
        Ok(Column {
            shape: self.shape,
            data,
            validity,
            precision: self.precision,
        })
    }

    /// Appends the column's values to `data`, which must hold the same
    /// dtype (string values are moved out of `self`), with the checks of
    /// [`ColumnRef::to_column`]: the shape's product, the buffer's length or
    /// the number of strings, bool bytes.
    pub fn append_to(&mut self, data: &mut ColumnData) -> Result<()> {
        let elements = product(&self.shape).ok_or_else(|| {
            Error::refused(
                Clause::FrameSizeOverflow,
                "",
                "the product of the shape overflows",
            )
        })?;
        let dtype = self.dtype;
        let bytes = match (&mut self.data, data) {
            (ColumnBytes::Strings(values), ColumnData::String(out))
                if values.len() as u64 == elements =>
            {
                // Into an empty column (`into_column`, a system's strings)
                // the vector itself moves: no second allocation.
                if out.is_empty() {
                    std::mem::swap(out, values);
                } else {
                    out.append(values);
                }
                return Ok(());
            }
            (ColumnBytes::Strings(values), _) => {
                return Err(Error::refused(
                    Clause::FrameStringValues,
                    "",
                    format!(
                        "{} string values for a {dtype} column of {elements} elements",
                        values.len(),
                    ),
                ))
            }
            (ColumnBytes::Buffer(b), out) => (*b, out),
        };
        let (b, out) = bytes;
        let expected = dtype
            .item_size()
            .and_then(|s| elements.checked_mul(s as u64));
        if expected != Some(b.len() as u64) || out.dtype() != dtype {
            return Err(Error::refused(
                Clause::FrameBufferBounds,
                "",
                format!(
                    "a buffer of {} bytes for a {dtype} column of {elements} elements",
                    b.len(),
                ),
            ));
        }
        extend_buffer(out, b)
    }

    /// The mask as bools, `None` when the header has none or every row is
    /// valid; refused unless it has `shape[0]` bytes of 0 / 1.
    pub fn mask(&self) -> Result<Option<Vec<bool>>> {
        let Some(mask) = self.validity else {
            return Ok(None);
        };
        let rows = self.shape.first().copied().unwrap_or(0);
        if mask.len() as u64 != rows {
            return Err(Error::refused(
                Clause::ValidityLength,
                "",
                format!("a mask of {} bytes for {rows} rows", mask.len()),
            ));
        }
        let mut out = Vec::with_capacity(mask.len());
        extend_bools(&mut out, mask, "a mask")?;
        Ok(Some(out).filter(|m| !m.iter().all(|&b| b)))
    }

    /// The buffer viewed in place as `T`, when the dtype is `dtype`, the
    /// target is little-endian and the real address is aligned for `T`.
    fn view<T: PlainOld>(&self, dtype: DType) -> Option<&'a [T]> {
        let size = std::mem::size_of::<T>();
        let ColumnBytes::Buffer(bytes) = self.data else {
            return None;
        };
        if self.dtype != dtype || !cfg!(target_endian = "little") || bytes.len() % size != 0 {
            return None;
        }
        if bytes.is_empty() {
            return Some(&[]);
        }
        if !bytes.as_ptr().cast::<T>().is_aligned() {
            return None;
        }
        // SAFETY: `bytes` is a live slice borrowed for 'a; its start address
        // was just checked to be aligned for `T`, and its length is a whole
        // number of `T`s, so the new slice covers exactly the same memory.
        // `T: PlainOld` is valid for every bit pattern, and on a
        // little-endian target its memory is the buffer's little-endian
        // encoding. The bytes
        // are shared and immutable for 'a, as the new slice requires.
        Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) })
    }

    /// A zero-copy view of an `f64` column: `Some` when the dtype is `f64`,
    /// the target is little-endian and the buffer's real address is 8-aligned
    /// (LMDB puts small values at 2-aligned addresses: then `None`, and the
    /// caller falls back to [`ColumnRef::to_column`]). Flat, row-major.
    pub fn f64_view(&self) -> Option<&'a [f64]> {
        self.view::<f64>(DType::F64)
    }

    /// The values of an `f64` column, flat and row-major: viewed in place
    /// when [`ColumnRef::f64_view`] can, else copied into `scratch` (cleared
    /// first; no allocation once it has grown to the column's size). `None`
    /// when the dtype is not `f64` or the buffer is not whole `f64`s.
    pub fn f64_values<'s>(&self, scratch: &'s mut Vec<f64>) -> Option<&'s [f64]>
    where
        'a: 's,
    {
        if let Some(view) = self.f64_view() {
            return Some(view);
        }
        let ColumnBytes::Buffer(bytes) = self.data else {
            return None;
        };
        if self.dtype != DType::F64 || bytes.len() % 8 != 0 {
            return None;
        }
        scratch.clear();
        extend(scratch, bytes, f64::from_le_bytes);
        Some(scratch)
    }

    /// A zero-copy view of a `u64` column, under the same conditions as
    /// [`ColumnRef::f64_view`].
    pub fn u64_view(&self) -> Option<&'a [u64]> {
        self.view::<u64>(DType::U64)
    }
}

impl BlockRef<'_> {
    /// An owned copy of the block (every column through [`ColumnRef::to_column`]).
    pub fn to_block(&self) -> Result<Block> {
        let mut columns = BTreeMap::new();
        for (name, column) in &self.columns {
            columns.insert(
                name.clone(),
                column
                    .to_column()
                    .map_err(|e| e.within(&format!("columns.{name}")))?,
            );
        }
        Ok(Block {
            count: self.count,
            columns,
            structural_shape: self.structural_shape.clone(),
            targets: self.targets.clone(),
            attributes: self.attributes.clone(),
        })
    }
}

impl BlockRef<'_> {
    /// [`BlockRef::to_block`], moving names, shapes and strings instead of
    /// copying them.
    pub fn into_block(self) -> Result<Block> {
        let mut columns = BTreeMap::new();
        for (name, column) in self.columns {
            let column = column
                .into_column()
                .map_err(|e| e.within(&format!("columns.{name}")))?;
            columns.insert(name, column);
        }
        Ok(Block {
            count: self.count,
            columns,
            structural_shape: self.structural_shape,
            targets: self.targets,
            attributes: self.attributes,
        })
    }
}

impl FrameRef<'_> {
    /// Owned blocks, moving names, shapes and strings out of the frame.
    pub fn into_blocks(self) -> Result<BTreeMap<String, Block>> {
        let mut blocks = BTreeMap::new();
        for (name, block) in self.blocks {
            let block = block
                .into_block()
                .map_err(|e| e.within(&format!("blocks.{name}")))?;
            blocks.insert(name, block);
        }
        Ok(blocks)
    }

    /// Owned copies of every block.
    pub fn to_blocks(&self) -> Result<BTreeMap<String, Block>> {
        let mut blocks = BTreeMap::new();
        for (name, block) in &self.blocks {
            blocks.insert(
                name.clone(),
                block
                    .to_block()
                    .map_err(|e| e.within(&format!("blocks.{name}")))?,
            );
        }
        Ok(blocks)
    }
}
