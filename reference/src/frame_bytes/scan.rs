//! The fast header scanner: one pass over the header text for the shapes
//! the encoder writes, with exact decimal reads; it declines anything else
//! to the serde path.

use super::*;

//
// A single pass over the header text for the shapes the encoder writes: plain
// keys (no escapes), integers where integers belong, known keys only. It
// borrows from the text and builds the same `RawHeader` the serde path
// builds, then runs the same `finish`. Sub-values it does not read itself
// (`meta`, `meta_types`, `attributes`, `targets`, `box`, `time`, a string
// column's `values`, a `precision`, a non-integer `step`, an unknown key's
// value) are cut out whole and handed to `serde_json` — the same
// deserialization the serde path runs on the same text. On anything else
// (escapes in a key or name, a float or sign where an integer belongs, a
// repeated key, deep nesting, malformed JSON, any refusal) it gives up with
// `None`, and `decode` runs the serde path, which stays the reference for
// every refusal and its clause.

/// Nesting allowed inside a sub-value cut out for `serde_json`: the sub-value
/// sits at most 4 levels deep in the header, and `serde_json`'s limit is 128,
/// so a sub-value the scanner accepts never hits the limit inline either.
pub(super) const FAST_MAX_DEPTH: usize = 64;

pub(super) fn decode_fast_header<'a>(
    value: &'a [u8],
    text: &str,
    payload_start: usize,
) -> Option<FrameRef<'a>> {
    scan_header(value, text, payload_start, false, None)
}

/// The fast scanner over `text`, either a whole header or (`after_blocks`)
/// what follows known blocks; see [`Scan::header`].
pub(super) fn scan_header<'a>(
    value: &'a [u8],
    text: &str,
    payload_start: usize,
    after_blocks: bool,
    recycled: Option<Document>,
) -> Option<FrameRef<'a>> {
    scan_header_ranged(value, text, payload_start, after_blocks, recycled).map(|(frame, _)| frame)
}

/// [`scan_header`], with where the `blocks` value's text is.
pub(super) fn scan_header_ranged<'a>(
    value: &'a [u8],
    text: &str,
    payload_start: usize,
    after_blocks: bool,
    recycled: Option<Document>,
) -> Option<(FrameRef<'a>, Option<std::ops::Range<usize>>)> {
    let ctx = Ctx {
        value,
        payload_start,
        stash: std::cell::Cell::new(None),
    };
    let mut scan = Scan {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let raw = scan.header(&ctx, after_blocks, recycled)?;
    // `de.end()`: only whitespace after the header object.
    if scan.peek().is_some() {
        return None;
    }
    let range = raw.blocks_range.clone();
    finish(raw).ok().map(|frame| (frame, range))
}

/// The bytes that end a plain string: its closing quote, or what the scanner
/// gives up on (an escape, a control character `serde_json` refuses).
pub(super) static STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The scanner's position in the header text. Every method returns `None`
/// where it gives up.
pub(super) struct Scan<'t> {
    pub(super) text: &'t str,
    pub(super) bytes: &'t [u8],
    pub(super) at: usize,
}

impl<'t> Scan<'t> {
    /// Skips JSON whitespace.
    #[inline]
    fn ws(&mut self) {
        // The encoder writes no whitespace: one test in the common case.
        match self.bytes.get(self.at) {
            Some(&c) if c <= b' ' => {}
            _ => return,
        }
        while let Some(&c) = self.bytes.get(self.at) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.at += 1;
        }
    }

    /// The next byte after whitespace (not consumed).
    #[inline]
    pub(super) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes.get(self.at).copied()
    }

    /// Consumes `c` after whitespace.
    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? != c {
            return None;
        }
        self.at += 1;
        Some(())
    }

    /// A string without escapes or control characters, borrowed.
    #[inline]
    fn plain_str(&mut self) -> Option<&'t str> {
        self.eat(b'"')?;
        let start = self.at;
        let len = self
            .bytes
            .get(start..)?
            .iter()
            .position(|&c| STRING_STOP[usize::from(c)])?;
        self.at = start + len;
        if self.bytes[self.at] != b'"' {
            return None;
        }
        // Both ends sit at an ASCII quote: char boundaries of the text.
        let s = self.text.get(start..self.at)?;
        self.at += 1;
        Some(s)
    }

    /// Walks an object: `member` reads the value of each key.
    #[inline]
    pub(super) fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, &'t str) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        let key = self.plain_str()?;
        self.eat(b':')?;
        member(self, key)?;
        self.rest_of_object(member)
    }

    /// The rest of an object whose opening and first member were read
    /// (before this text or by the caller): `,` and more members, then `}`.
    #[inline]
    fn rest_of_object(
        &mut self,
        mut member: impl FnMut(&mut Self, &'t str) -> Option<()>,
    ) -> Option<()> {
        loop {
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
            let key = self.plain_str()?;
            self.eat(b':')?;
            member(self, key)?;
        }
    }

    /// An unsigned integer as `serde_json` reads one into a `u64`: digits, no
    /// leading zero, no fraction or exponent, no overflow.
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        self.ws();
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(&c) = self.bytes.get(self.at) {
            if !c.is_ascii_digit() {
                break;
            }
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.at += 1;
        }
        let len = self.at - start;
        if len == 0 || (len > 1 && self.bytes[start] == b'0') {
            return None;
        }
        if matches!(self.bytes.get(self.at), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(n)
    }

    /// An array of strings without escapes (a string column's `values`).
    fn plain_str_array(&mut self) -> Option<Vec<String>> {
        self.plain_str_array_of(0)
    }

    /// [`Scan::plain_str_array`] with room for `expected` values (the
    /// column's element count; at most one per three bytes of the text).
    fn plain_str_array_of(&mut self, expected: u64) -> Option<Vec<String>> {
        let room = (self.bytes.len().saturating_sub(self.at) / 3).min(expected as usize);
        self.array(Vec::with_capacity(room), |s| {
            s.plain_str().map(str::to_owned)
        })
    }

    /// An array of `u64`s.
    fn u64_array(&mut self) -> Option<Vec<u64>> {
        // Shapes have one to three axes: one allocation, no growth.
        self.array(Vec::with_capacity(4), Self::u64)
    }

    /// An array whose items `item` reads, appended to `out`.
    #[inline]
    fn array<T>(
        &mut self,
        mut out: Vec<T>,
        mut item: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Vec<T>> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(out);
        }
        loop {
            out.push(item(self)?);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    /// An integer as a JSON value, the way `serde_json` represents it (a
    /// non-negative one as a `u64`, a negative one as an `i64`); `-0` and
    /// anything beyond the `i64` range are left to the slow path.
    fn int_value(&mut self) -> Option<Value> {
        if self.peek()? == b'-' {
            self.at += 1;
            if !self.bytes.get(self.at)?.is_ascii_digit() {
                return None;
            }
            let n = self.u64()?;
            if n == 0 || n > i64::MAX as u64 {
                return None;
            }
            Some(Value::from(-(n as i64)))
        } else {
            Some(Value::from(self.u64()?))
        }
    }

    /// The text of the next JSON value, not checked (the caller hands it to
    /// `serde_json`); `None` past [`FAST_MAX_DEPTH`] or the end of the text.
    pub(super) fn raw(&mut self) -> Option<&'t str> {
        self.ws();
        let start = self.at;
        let mut depth = 0usize;
        loop {
            match *self.bytes.get(self.at)? {
                b'{' | b'[' => {
                    depth += 1;
                    if depth > FAST_MAX_DEPTH {
                        return None;
                    }
                    self.at += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.at += 1;
                }
                b'"' => {
                    self.at += 1;
                    loop {
                        match *self.bytes.get(self.at)? {
                            b'"' => break,
                            b'\\' => self.at += 2,
                            _ => self.at += 1,
                        }
                    }
                    self.at += 1;
                }
                _ if depth == 0 => {
                    // A scalar: up to the next structural byte or whitespace.
                    while let Some(&c) = self.bytes.get(self.at) {
                        if matches!(
                            c,
                            b',' | b':'
                                | b'{'
                                | b'}'
                                | b'['
                                | b']'
                                | b'"'
                                | b' '
                                | b'\n'
                                | b'\r'
                                | b'\t'
                        ) {
                            break;
                        }
                        self.at += 1;
                    }
                }
                _ => self.at += 1,
            }
            if depth == 0 {
                break;
            }
        }
        self.text.get(start..self.at)
    }

    /// The next value, deserialized by `serde_json` from its own text.
    fn serde<T: de::DeserializeOwned>(&mut self) -> Option<T> {
        serde_json::from_str(self.raw()?).ok()
    }

    /// An object value that is most often `{}`: no parse, no allocation then.
    fn maybe_empty<T: de::DeserializeOwned + Default>(&mut self) -> Option<T> {
        if self.peek()? == b'{' {
            let save = self.at;
            self.at += 1;
            if self.peek()? == b'}' {
                self.at += 1;
                return Some(T::default());
            }
            self.at = save;
        }
        self.serde()
    }

    /// The header object. With `after_blocks`, the text is what follows
    /// `{"blocks":` and a `blocks` value already accepted: the header's
    /// other members, whose `blocks` comes back empty.
    ///
    /// A `meta` document with exactly `recycled`'s keys, in its order, is
    /// read into `recycled` (no allocation).
    fn header<'a>(
        &mut self,
        ctx: &Ctx<'a>,
        after_blocks: bool,
        mut recycled: Option<Document>,
    ) -> Option<RawHeader<'a>> {
        let (mut blocks, mut meta, mut meta_types, mut step, mut time, mut cell) =
            (None, None, None, None, None, None);
        let mut blocks_range = None;
        if after_blocks {
            blocks = Some(BTreeMap::new());
        }
        let member = |s: &mut Self, key: &str| match key {
            "blocks" => {
                s.ws();
                let start = s.at;
                once(&mut blocks, s.blocks(ctx)?)?;
                blocks_range = Some(start..s.at);
                Some(())
            }
            "meta" => {
                let save = s.at;
                let reused = recycled
                    .take()
                    .filter(|d| !d.is_empty())
                    .and_then(|d| s.same_keys_doc(d));
                let doc = match reused {
                    Some(doc) => doc,
                    None => {
                        s.at = save;
                        match s.simple_doc() {
                            Some(doc) => doc,
                            None => {
                                s.at = save;
                                s.serde()?
                            }
                        }
                    }
                };
                once(&mut meta, doc)
            }
            "meta_types" => once(&mut meta_types, s.maybe_empty()?),
            "step" => {
                let v = match s.peek()? {
                    b'-' | b'0'..=b'9' => {
                        let save = s.at;
                        match s.int_value() {
                            Some(v) => v,
                            None => {
                                s.at = save;
                                s.serde()?
                            }
                        }
                    }
                    _ => s.serde()?,
                };
                once(&mut step, v)
            }
            "time" => once(&mut time, s.serde()?),
            "box" => once(&mut cell, s.serde()?),
            _ => s.serde::<IgnoredAny>().map(drop),
        };
        if after_blocks {
            self.rest_of_object(member)?;
        } else {
            self.object(member)?;
        }
        Some(RawHeader {
            blocks: blocks?,
            blocks_range,
            meta,
            meta_types,
            step,
            time,
            cell,
        })
    }

    /// The `blocks` object.
    fn blocks<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BTreeMap<String, BlockRef<'a>>> {
        let mut blocks = BTreeMap::new();
        self.object(|s, name| {
            let block = s.block(ctx)?;
            blocks
                .insert(name.to_owned(), block)
                .is_none()
                .then_some(())
        })?;
        Some(blocks)
    }

    /// One block object: as the encoder writes one (`count`,
    /// `structural_shape`, `columns`, in that order) in one pass, anything
    /// else member by member.
    fn block<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BlockRef<'a>> {
        let save = self.at;
        if let Some(block) = self.block_as_written(ctx) {
            return Some(block);
        }
        self.at = save;
        let (mut count, mut structural_shape, mut columns, mut targets, mut attributes) =
            (None, None, None, None, None);
        self.object(|s, key| match key {
            "count" => once(&mut count, s.u64()?),
            "structural_shape" => {
                let v = if s.peek()? == b'n' {
                    s.literal("null")?;
                    None
                } else {
                    Some(s.u64_array()?)
                };
                once(&mut structural_shape, v)
            }
            "columns" => once(&mut columns, s.columns(ctx)?),
            "targets" => once(&mut targets, s.maybe_empty()?),
            "attributes" => once(&mut attributes, s.maybe_empty()?),
            _ => s.serde::<IgnoredAny>().map(drop),
        })?;
        block_from_parts(
            count?,
            structural_shape.flatten(),
            columns?,
            targets,
            attributes,
        )
    }

    /// `{"count":N,"structural_shape":null|[..],"columns":{..}}` exactly
    /// (no whitespace, no other member): what [`Scan::block`]'s general
    /// walk makes of the same text; `None` on anything else.
    fn block_as_written<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BlockRef<'a>> {
        self.exactly(b"{\"count\":")?;
        let count = self.u64()?;
        self.exactly(b",\"structural_shape\":")?;
        let structural_shape = if self.exactly(b"null").is_some() {
            None
        } else {
            Some(self.u64_array()?)
        };
        self.exactly(b",\"columns\":")?;
        let columns = self.columns(ctx)?;
        self.exactly(b"}")?;
        block_from_parts(count, structural_shape, columns, None, None)
    }

    /// A block's `columns` object.
    fn columns<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BTreeMap<String, ColumnRef<'a>>> {
        let mut columns = BTreeMap::new();
        self.object(|s, name| {
            let column = s.column(ctx)?;
            columns
                .insert(name.to_owned(), column)
                .is_none()
                .then_some(())
        })?;
        Some(columns)
    }

    /// One column entry: as the encoder writes one without a mask or a
    /// precision in one pass, anything else member by member.
    fn column<'a>(&mut self, ctx: &Ctx<'a>) -> Option<ColumnRef<'a>> {
        let save = self.at;
        if let Some(column) = self.column_as_written(ctx) {
            return Some(column);
        }
        self.at = save;
        let (mut dtype, mut shape, mut offset, mut values, mut validity, mut precision) =
            (None, None, None, None, None, None);
        self.object(|s, key| match key {
            "dtype" => once(&mut dtype, DType::parse(s.plain_str()?)?),
            "shape" => once(&mut shape, s.u64_array()?),
            "offset" => once(&mut offset, s.u64()?),
            "values" => {
                let save = s.at;
                let v = match s.plain_str_array() {
                    Some(v) => v,
                    None => {
                        s.at = save;
                        s.serde::<Vec<String>>()?
                    }
                };
                once(&mut values, v)
            }
            "validity" => once(&mut validity, s.u64()?),
            "precision" => once(&mut precision, s.serde::<f64>()?),
            _ => s.serde::<IgnoredAny>().map(drop),
        })?;
        column_from_parts(ctx, dtype?, shape, offset, values, validity, precision).ok()
    }

    /// `{"dtype":"D","shape":[..],"offset":N}` or `..,"values":[..]}`
    /// exactly: what [`Scan::column`]'s general walk makes of the same
    /// text; `None` on anything else.
    fn column_as_written<'a>(&mut self, ctx: &Ctx<'a>) -> Option<ColumnRef<'a>> {
        self.exactly(b"{\"dtype\":")?;
        let dtype = DType::parse(self.plain_str()?)?;
        self.exactly(b",\"shape\":")?;
        let shape = self.u64_array()?;
        let (offset, values) = if self.exactly(b",\"offset\":").is_some() {
            (Some(self.u64()?), None)
        } else {
            self.exactly(b",\"values\":")?;
            let expected = shape.iter().try_fold(1u64, |a, &b| a.checked_mul(b));
            (None, Some(self.plain_str_array_of(expected.unwrap_or(0))?))
        };
        self.exactly(b"}")?;
        column_from_parts(ctx, dtype, Some(shape), offset, values, None, None).ok()
    }

    /// Consumes `literal` if the text continues with exactly it (no
    /// whitespace skipped).
    #[inline]
    pub(super) fn exactly<const N: usize>(&mut self, literal: &[u8; N]) -> Option<()> {
        let end = self.at.checked_add(N)?;
        let next: &[u8; N] = self.bytes.get(self.at..end)?.try_into().ok()?;
        (next == literal).then(|| self.at = end)
    }

    /// A document of plain keys (no escapes) whose values are integers,
    /// numbers or plain strings, in one pass; `None` on anything else (the
    /// caller then hands the whole document to `serde_json`). A repeated key
    /// keeps its last value, as `serde_json`'s map does.
    pub(super) fn simple_doc(&mut self) -> Option<Document> {
        let mut doc = Document::new();
        self.object(|s, key| {
            let v = s.simple_value()?;
            doc.insert(key.to_owned(), v);
            Some(())
        })?;
        Some(doc)
    }

    /// [`Scan::simple_doc`] into `doc`'s map when the object's keys are
    /// `doc`'s keys in `doc`'s (sorted) order, each once: then every value is
    /// replaced and the result is what `simple_doc` gives. `None` otherwise
    /// (the position is then undefined).
    fn same_keys_doc(&mut self, mut doc: Document) -> Option<Document> {
        let mut slots = doc.iter_mut();
        self.object(|s, key| {
            let (known, slot) = slots.next()?;
            if known != key {
                return None;
            }
            *slot = s.simple_value()?;
            Some(())
        })?;
        if slots.next().is_some() {
            return None;
        }
        Some(doc)
    }

    /// A simple document's value: a plain string or a number.
    fn simple_value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => Some(Value::String(self.plain_str()?.to_owned())),
            _ => self.number(),
        }
    }

    /// A JSON number as `serde_json` reads it into a `Value` (see
    /// [`json_number`]), after whitespace.
    fn number(&mut self) -> Option<Value> {
        self.ws();
        json_number(self.bytes, &mut self.at)
    }

    /// Consumes the literal `word` (after whitespace), which must end there.
    fn literal(&mut self, word: &str) -> Option<()> {
        self.ws();
        let end = self.at.checked_add(word.len())?;
        if self.bytes.get(self.at..end)? != word.as_bytes()
            || self.bytes.get(end).is_some_and(u8::is_ascii_alphanumeric)
        {
            return None;
        }
        self.at = end;
        Some(())
    }
}

/// Powers of ten that are exact `f64`s.
pub(super) const EXACT_POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The value of 8 ASCII digits, `None` if one of the bytes is not a digit
/// (the usual SWAR reading: every byte checked at once, then pairs, quads
/// and the two halves combined).
pub(super) fn eight_digits(bytes: &[u8]) -> Option<u64> {
    let x = u64::from_le_bytes(bytes.try_into().ok()?);
    // Each byte is 0x30..=0x39: its high nibble is 3, and adding 6 keeps it 3.
    let high = (x & 0xF0F0_F0F0_F0F0_F0F0)
        | ((x.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) >> 4);
    if high != 0x3333_3333_3333_3333 {
        return None;
    }
    let x = x - 0x3030_3030_3030_3030;
    let x = (x.wrapping_mul(10) + (x >> 8)) & 0x00FF_00FF_00FF_00FF;
    let x = (x.wrapping_mul(100) + (x >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((x.wrapping_mul(10_000) + (x >> 32)) & 0xFFFF_FFFF)
}

/// `mantissa * 10^power` correctly rounded (to nearest, ties to even), for
/// `|power| <= 21`; `None` outside what it computes exactly.
///
/// - `mantissa <= 2^53` and `|power| <= 22`: both are exact `f64`s, and one
///   IEEE multiplication or division rounds their product or quotient
///   correctly (Clinger's fast path).
/// - `power >= 0`: the product is an exact `u128` (when it fits), and
///   `u128 as f64` rounds to nearest, ties to even.
/// - `power < 0`: the mantissa shifted to fill 128 bits, divided by
///   `10^-power` (at most 2^70): the quotient has at least 57 bits, and a
///   non-zero remainder is folded into its lowest bit, below the rounding
///   bit, so `as f64` rounds the quotient as it would the exact value; the
///   shift is then undone by an exact power of two (the value is a normal
///   number: at least 10^-21).
pub(super) fn exact_decimal(mantissa: u64, power: i64) -> Option<f64> {
    if mantissa == 0 {
        return Some(0.0);
    }
    if mantissa <= 1 << 53 && (-22..=22).contains(&power) {
        let m = mantissa as f64;
        let p = EXACT_POWERS_OF_TEN[power.unsigned_abs() as usize];
        return Some(if power < 0 { m / p } else { m * p });
    }
    if !(-21..=21).contains(&power) {
        return None;
    }
    let ten = 10u128.pow(power.unsigned_abs() as u32);
    if power >= 0 {
        return Some(u128::from(mantissa).checked_mul(ten)? as f64);
    }
    let shift = mantissa.leading_zeros() + 64;
    let scaled = u128::from(mantissa) << shift;
    let (q, r) = (scaled / ten, scaled % ten);
    let q = q | u128::from(r != 0);
    // 2^-shift, shift <= 127: an exact power of two.
    let unscale = f64::from_bits((1023 - u64::from(shift)) << 52);
    Some(q as f64 * unscale)
}

/// The JSON number at `bytes[*at..]` as `serde_json` reads it into a
/// `Value`, moving `at` past it: an integer as [`Scan::int_value`] reads it
/// (`-0` and integers beyond `i64`/`u64` are left to the slow path); a real
/// (a fraction or an exponent), when finite, correctly rounded as
/// `serde_json` with `float_roundtrip` rounds it (`serde_json` refuses an
/// out-of-range real). `None`, `at` unchanged, for anything else.
///
/// A real of at most 19 digits with a decimal exponent within 21 is read
/// exactly by [`exact_decimal`]; any other goes through the standard
/// library's parse.
pub(super) fn json_number(bytes: &[u8], at: &mut usize) -> Option<Value> {
    let start = *at;
    let mut i = start;
    let negative = bytes.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let mut mantissa = 0u64;
    let mut digits = |i: &mut usize| {
        let from = *i;
        // Eight digits at a time while there are (most of a real's digits).
        while let Some(eight) = bytes.get(*i..*i + 8).and_then(eight_digits) {
            mantissa = mantissa.wrapping_mul(100_000_000).wrapping_add(eight);
            *i += 8;
        }
        while let Some(&c) = bytes.get(*i).filter(|c| c.is_ascii_digit()) {
            mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
            *i += 1;
        }
        *i - from
    };
    let int_start = i;
    let int_len = digits(&mut i);
    if int_len == 0 || (int_len > 1 && bytes[int_start] == b'0') {
        return None;
    }
    let mut frac_len = 0usize;
    let mut real = false;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        frac_len = digits(&mut i);
        if frac_len == 0 {
            return None;
        }
        real = true;
    }
    let mut exponent = 0i64;
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        let minus = match bytes.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let from = i;
        while let Some(&c) = bytes.get(i).filter(|c| c.is_ascii_digit()) {
            exponent = (exponent * 10 + i64::from(c - b'0')).min(1 << 40);
            i += 1;
        }
        if i == from {
            return None;
        }
        if minus {
            exponent = -exponent;
        }
        real = true;
    }
    if !real {
        // What `Scan::int_value` gives: the digits as a u64 (checked), and
        // a negative one as an i64.
        let mut scan = Scan {
            text: "",
            bytes,
            at: start,
        };
        let value = scan.int_value()?;
        *at = scan.at;
        return Some(value);
    }
    let power = exponent - frac_len as i64;
    let x = match (int_len + frac_len <= 19)
        .then(|| exact_decimal(mantissa, power))
        .flatten()
    {
        Some(x) if negative => -x,
        Some(x) => x,
        None => std::str::from_utf8(bytes.get(start..i)?)
            .ok()?
            .parse()
            .ok()?,
    };
    if !x.is_finite() {
        return None;
    }
    *at = i;
    Some(Value::Number(serde_json::Number::from_f64(x)?))
}

/// Stores a field the first time; `None` (give up) on a repeated key.
#[inline]
pub(super) fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}
