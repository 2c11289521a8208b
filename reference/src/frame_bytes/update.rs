//! Consecutive trajectory updates with the same blocks: [`BlocksMemo`],
//! [`decode_update`] and the read path's `decode_update_known`.

use super::*;

// Consecutive updates with the same blocks
// ---------------------------------------------------------------------------
//
// The updates of one trajectory usually differ only in `step`, `time` and
// the per-step `meta`: their `blocks` text (names, dtypes, shapes, offsets)
// is byte-for-byte the same. Decoding that text is most of a frame's cost,
// so `decode_update` compares it with the last update decoded in full and,
// when equal, skips it. That is exact, not a guess: what the decoder makes of
// a `blocks` text depends only on the text and on the payload's length, with
// two exceptions that read payload bytes (bool buffers and validity masks
// must hold 0 / 1), and an update with either is never remembered.

/// What [`decode_update`] keeps of the last update it decoded in full.
#[derive(Debug, Default)]
pub struct BlocksMemo {
    /// The `blocks` value's text, as written.
    text: Vec<u8>,
    /// The payload length that text was checked against.
    payload_len: usize,
    /// Whether the next update may be compared with `text` at all.
    usable: bool,
    /// A meta document of the last update, whose map the next update's meta
    /// may be read into when it has the same keys.
    recycled: Document,
}

impl BlocksMemo {
    /// Hands back an update's meta document once its caller is done with it:
    /// the next update with the same per-step keys reuses its map.
    pub fn recycle(&mut self, meta: Document) {
        self.recycled = meta;
    }

    /// Remembers `frame`'s blocks (decoded in full from `text`), when the
    /// result does not depend on payload bytes.
    /// `range`: where the `blocks` value is in `text`, when the scanner
    /// said (else it is found again).
    fn remember(
        &mut self,
        text: &str,
        range: Option<std::ops::Range<usize>>,
        payload_len: usize,
        frame: &FrameRef<'_>,
    ) {
        self.usable = false;
        if !blocks_reusable(&frame.blocks) {
            return;
        }
        if let Some(range) = range.filter(|r| r.start == BLOCKS_FIRST.len()) {
            self.text.clear();
            self.text.extend_from_slice(&text.as_bytes()[range]);
            self.payload_len = payload_len;
            self.usable = true;
            return;
        }
        let mut scan = Scan {
            text,
            bytes: text.as_bytes(),
            at: 0,
        };
        let mut range = None;
        let walked = scan.object(|s, key| {
            let value = s.raw()?;
            if key == "blocks" {
                let end = s.at;
                // Only a header that starts with `{"blocks":` is remembered.
                range = Some(end - value.len()..end).filter(|r| r.start == BLOCKS_FIRST.len());
            }
            Some(())
        });
        if let (Some(()), Some(range)) = (walked, range) {
            self.text.clear();
            self.text.extend_from_slice(&text.as_bytes()[range]);
            self.payload_len = payload_len;
            self.usable = true;
        }
    }
}

/// A trajectory update as [`decode_update`] returns it.
#[derive(Debug)]
pub enum Update<'a> {
    /// Decoded in full.
    Full {
        /// The frame.
        frame: FrameRef<'a>,
        /// Its payload (from the first 8-aligned byte after the header).
        payload: &'a [u8],
    },
    /// The `blocks` text and the payload length are those of the last
    /// update decoded in full with the same [`BlocksMemo`]: its blocks are
    /// that update's, every buffer at the same offset of `payload`.
    SameBlocks {
        /// This update's payload (from the first 8-aligned byte after the header).
        payload: &'a [u8],
        /// Meta, step, time and cell, decoded and checked as [`decode`] does.
        info: FrameInfo,
    },
}

/// [`decode`] for the updates of one trajectory in order: an update whose
/// `blocks` text repeats the last full update's comes back as
/// [`Update::SameBlocks`], without decoding or allocating its blocks again.
/// Accepts and refuses exactly what [`decode`] does.
pub fn decode_update<'a>(value: &'a [u8], memo: &mut BlocksMemo) -> Result<Update<'a>> {
    match decode_update_known(value, memo, &mut |_, _| None::<()>)? {
        Known::Update(update) => Ok(update),
        // The lookup never finds anything.
        Known::Found { payload, info, .. } => Ok(Update::SameBlocks { payload, info }),
    }
}

/// What [`decode_update_known`] returns.
#[derive(Debug)]
pub(crate) enum Known<'a, K> {
    /// What [`decode_update`] returns.
    Update(Update<'a>),
    /// The update's `blocks` text (and payload length) is one `known` knew:
    /// what it made of an earlier update with that text, this update's
    /// payload and the rest of its header, decoded and checked as
    /// [`decode`] does. `memo` now holds that text.
    Found {
        known: K,
        payload: &'a [u8],
        info: FrameInfo,
    },
}

/// [`decode_update`], asking `known` about the update's `blocks` text (and
/// payload length) before decoding it, when it is not the memo's: an
/// answer is something the caller made of an earlier update with the same
/// text (so the same blocks, the same buffers at the same offsets), and
/// then the text is not decoded again. Accepts and refuses exactly what
/// [`decode`] does, whatever `known` answers, provided it answers only
/// for a text it was handed with an update [`decode_update`] decoded in
/// full and remembered (one whose decoding reads no payload bytes).
pub(crate) fn decode_update_known<'a, K>(
    value: &'a [u8],
    memo: &mut BlocksMemo,
    known: &mut dyn FnMut(&[u8], usize) -> Option<K>,
) -> Result<Known<'a, K>> {
    let (header, payload_start) = header_bytes(value)?;
    // `header_bytes` checked payload_start <= value.len().
    let payload = value.get(payload_start..).unwrap_or_default();
    let repeated = (memo.usable && payload.len() == memo.payload_len)
        .then(|| {
            header
                .strip_prefix(BLOCKS_FIRST)
                .and_then(|h| h.strip_prefix(memo.text.as_slice()))
        })
        .flatten();
    let mut found = None;
    let rest = match repeated {
        Some(rest) => Some(rest),
        None => header.strip_prefix(BLOCKS_FIRST).and_then(|h| {
            let end = json_value_end(h)?;
            let answer = known(&h[..end], payload.len())?;
            found = Some(answer);
            memo.text.clear();
            memo.text.extend_from_slice(&h[..end]);
            memo.payload_len = payload.len();
            memo.usable = true;
            Some(&h[end..])
        }),
    };
    if let Some(rest) = rest {
        let meta = std::mem::take(&mut memo.recycled);
        if let Some(info) = rest_info(value, rest, payload_start, meta) {
            return Ok(match found {
                Some(known) => Known::Found {
                    known,
                    payload,
                    info,
                },
                None => Known::Update(Update::SameBlocks { payload, info }),
            });
        }
    }
    let text = header_utf8(header)?;
    let (frame, range) = match scan_header_ranged(value, text, payload_start, false, None) {
        Some(scanned) => scanned,
        None => (decode_serde(value, text, payload_start)?, None),
    };
    memo.remember(text, range, payload.len(), &frame);
    Ok(Known::Update(Update::Full { frame, payload }))
}

/// The `blocks` value's text of a trajectory update's header, when the
/// header starts with `{"blocks":` as the encoder writes it (not checked:
/// for comparing with texts a full decode of this value accepted).
pub(crate) fn blocks_text(value: &[u8]) -> Option<&[u8]> {
    let (header, _) = header_bytes(value).ok()?;
    let h = header.strip_prefix(BLOCKS_FIRST)?;
    h.get(..json_value_end(h)?)
}

/// Whether [`BlocksMemo`] would remember the blocks of `frame` (their
/// decoding reads no payload byte: no bool column, no mask), so that an
/// update with the same `blocks` text and payload length has the same
/// blocks, as [`decode_same_blocks`] takes.
pub(crate) fn blocks_reusable(blocks: &BTreeMap<String, BlockRef<'_>>) -> bool {
    !blocks.values().any(|b| {
        b.columns
            .values()
            .any(|c| c.dtype == DType::Bool || c.validity.is_some())
    })
}

/// Where the rest of a trajectory update's header starts when it repeats
/// a known `blocks` text: when `value`'s header is `{"blocks":` + `text` +
/// the rest and its payload has `payload_len` bytes, the offsets (in
/// `value`) of the rest and of the payload; `Ok(None)` otherwise. Then the
/// update's blocks are those of the full update `text` was taken from,
/// every buffer at the same offset of the payload, provided `text` and
/// `payload_len` are a full update's that [`blocks_reusable`] accepts, as
/// [`BlocksMemo`]'s are. [`decode_rest`] reads the rest.
pub(crate) fn same_blocks_at(
    value: &[u8],
    text: &[u8],
    payload_len: usize,
) -> Result<Option<(usize, usize)>> {
    let (header, payload_start) = header_bytes(value)?;
    if value.len() - payload_start != payload_len {
        return Ok(None);
    }
    let repeats = header
        .strip_prefix(BLOCKS_FIRST)
        .is_some_and(|h| h.starts_with(text));
    Ok(repeats.then_some((8 + BLOCKS_FIRST.len() + text.len(), payload_start)))
}

/// The rest of an update's header after a repeated `blocks` text (at
/// `rest_start` of `value`, as [`same_blocks_at`] found it), decoded and
/// checked as [`decode`] does; `meta` is read into when the update's
/// per-step keys are its keys, in one pass. `None` when the rest is not
/// what the fast paths take: then [`decode_update`] decides.
pub(crate) fn decode_rest(value: &[u8], rest_start: usize, meta: Document) -> Option<FrameInfo> {
    let (header, payload_start) = header_bytes(value).ok()?;
    let rest = header.get(rest_start.checked_sub(8)?..)?;
    rest_info(value, rest, payload_start, meta)
}

/// An update's header after its `blocks` text: the tail the encoder writes,
/// read in one pass into `meta`; anything else goes to the scanner (the
/// known blocks text was UTF-8, as part of an accepted header; the rest is
/// checked here). `None` when the rest is not an update's.
fn rest_info(
    value: &[u8],
    rest: &[u8],
    payload_start: usize,
    mut meta: Document,
) -> Option<FrameInfo> {
    match update_tail(rest, &mut meta) {
        Some((step, time)) => Some(FrameInfo {
            meta,
            meta_types: None,
            step: Some(step),
            time,
            cell: None,
        }),
        None => std::str::from_utf8(rest)
            .ok()
            .and_then(|rest| scan_header(value, rest, payload_start, true, Some(meta)))
            .map(|frame| frame.info),
    }
}

/// The step at `bytes[*at..]`: what [`json_number`] reads there as an
/// integer that fits an `i64` (digits without a leading zero, not `-0`,
/// no fraction or exponent), in one pass; `None` on anything else.
pub(super) fn tail_step(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut i = *at;
    let negative = bytes.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let start = i;
    let mut n = 0u64;
    while let Some(&c) = bytes.get(i).filter(|c| c.is_ascii_digit()) {
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
        i += 1;
    }
    let len = i - start;
    if len == 0 || (len > 1 && bytes[start] == b'0') || (negative && n == 0) {
        return None;
    }
    if matches!(bytes.get(i), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let magnitude = i64::try_from(n).ok()?;
    *at = i;
    Some(if negative { -magnitude } else { magnitude })
}

/// Where the JSON value at the start of `bytes` ends (not checked: the
/// caller only compares the text with texts it knows), `None` past the
/// end of the bytes or [`FAST_MAX_DEPTH`].
pub(super) fn json_value_end(bytes: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut at = 0usize;
    loop {
        match *bytes.get(at)? {
            b'{' | b'[' => {
                depth += 1;
                if depth > FAST_MAX_DEPTH {
                    return None;
                }
            }
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b'"' => {
                at += 1;
                loop {
                    match *bytes.get(at)? {
                        b'"' => break,
                        b'\\' => at += 2,
                        _ => at += 1,
                    }
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
        at += 1;
        if depth == 0 {
            return Some(at);
        }
    }
}

impl BlocksMemo {
    /// The `blocks` text (and payload length) of the last update, when the
    /// memo holds it: [`decode_update_known`]'s caller may keep what it
    /// made of that update for later ones with the same text.
    pub(crate) fn holds(&self) -> Option<(&[u8], usize)> {
        self.usable
            .then_some((self.text.as_slice(), self.payload_len))
    }
}

/// What follows a repeated `blocks` value in the header of a trajectory
/// update as the encoder writes it: `,"meta":{..},"step":S`, optionally
/// `,"time":T`, then `}` and nothing more, with `meta` holding exactly
/// `meta`'s keys in its order (plain keys, number values, read into
/// `meta`'s map). Returns the step and the time: what the scanner and
/// `finish` make of such a text (the whole text is then ASCII but for the
/// keys, which are `meta`'s own). `None` on anything else, `meta`'s keys
/// unchanged.
pub(super) fn update_tail(rest: &[u8], meta: &mut Document) -> Option<(i64, Option<f64>)> {
    // Bytes are only compared here: the scan needs no text.
    let mut s = Scan {
        text: "",
        bytes: rest,
        at: 0,
    };
    s.exactly(b",\"meta\":{")?;
    for (i, (key, slot)) in meta.iter_mut().enumerate() {
        if i > 0 {
            s.exactly(b",")?;
        }
        s.exactly(b"\"")?;
        let end = s.at.checked_add(key.len())?;
        (rest.get(s.at..end)? == key.as_bytes()).then(|| s.at = end)?;
        s.exactly(b"\":")?;
        *slot = json_number(rest, &mut s.at)?;
    }
    s.exactly(b"},\"step\":")?;
    let step = tail_step(rest, &mut s.at)?;
    let time = if s.exactly(b",\"time\":").is_some() {
        match json_number(rest, &mut s.at)? {
            Value::Number(n) => Some(n.as_f64()?),
            _ => return None,
        }
    } else {
        None
    };
    (rest.get(s.at..)? == b"}").then_some((step, time))
}

/// How the encoder starts every header: `decode_update` reuses blocks only
/// after exactly this.
pub(super) const BLOCKS_FIRST: &[u8] = b"{\"blocks\":";

impl<'a> BlockRef<'a> {
    /// Points every buffer and mask of the block at the same offset of
    /// `new_payload` as it had in `old_payload` (the payload it was decoded
    /// from). `None`, with the block unchanged or partly moved, if a buffer
    /// does not lie inside `old_payload` or would not fit in `new_payload`.
    pub fn rebase(&mut self, old_payload: &[u8], new_payload: &'a [u8]) -> Option<()> {
        let moved = |bytes: &[u8]| -> Option<&'a [u8]> {
            let offset = (bytes.as_ptr() as usize).checked_sub(old_payload.as_ptr() as usize)?;
            if offset.checked_add(bytes.len())? > old_payload.len() {
                return None;
            }
            new_payload.get(offset..offset + bytes.len())
        };
        for column in self.columns.values_mut() {
            if let ColumnBytes::Buffer(bytes) = &mut column.data {
                *bytes = moved(bytes)?;
            }
            if let Some(mask) = &mut column.validity {
                *mask = moved(mask)?;
            }
        }
        Some(())
    }
}
