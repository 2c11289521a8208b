//! Malformed-file recipes: declarative edits, materialized into a real LMDB
//! file by raw `heed` writes, independent of any implementation.
//!
//! A recipe starts from a base (a canonical-JSON fixture written by a writer
//! the caller supplies, or an empty environment) and applies its edits in one
//! write transaction. In TOML:
//!
//! ```toml
//! base = { fixture = "collection/two-records.json" }   # or: base = "empty"
//!
//! [[edits]]
//! op = "set-json"
//! key = "meta"
//! pointer = "/layout_version"
//! value = "1"
//!
//! [[edits]]
//! op = "set-header"
//! key = "f:0"
//! pointer = "/blocks/atoms/columns/x/dtype"
//! value = "f32"
//! ```
//!
//! Keys are spelled `meta`, `index`, `ff`, `r:<n>`, `s:<n>`, `f:<n>` (decimal
//! n, stored as the prefix byte + u64 big-endian) or `hex:<bytes>` for a raw
//! key.

use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RwTxn};
use serde_json::Value;

use crate::inspect::frame_bytes::{self, DtypeKind};
use crate::inspect::Key;

/// A malformed-file recipe: a base and the edits applied to it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// What the file starts as.
    pub base: Base,
    /// Edits, applied in order in one write transaction.
    #[serde(default)]
    pub edits: Vec<Edit>,
}

impl Recipe {
    /// Parses a recipe from TOML text.
    pub fn from_toml(text: &str) -> Result<Recipe, RecipeError> {
        toml::from_str(text).map_err(|e| RecipeError::whole(format!("recipe is not valid: {e}")))
    }
}

/// The starting point of a recipe.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Base {
    /// A canonical-JSON fixture (path relative to `fixtures/`), written by
    /// the writer the caller supplies to [`materialize`].
    Fixture(String),
    /// An empty environment.
    Empty,
}

/// One raw edit of the file. `key` uses the key spelling of the module doc.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Edit {
    /// Put a value: exactly one of `json` (serialized compactly), `hex` (raw
    /// bytes) or `text` (UTF-8).
    Put {
        /// The key.
        key: String,
        /// A JSON value to store.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        json: Option<Value>,
        /// Raw bytes, as hex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hex: Option<String>,
        /// UTF-8 text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Delete a key (it must exist).
    Delete {
        /// The key.
        key: String,
    },
    /// Set the member at an RFC 6901 pointer of the JSON value at `key`
    /// (the last member is created when absent; `-` appends to a list; the
    /// empty pointer replaces the whole value).
    SetJson {
        /// The key.
        key: String,
        /// RFC 6901 pointer.
        pointer: String,
        /// The new value; exactly one of `value` and `value-json`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        /// The new value as JSON text: TOML has no null, so a null (or a
        /// value holding one) is given this way.
        #[serde(
            default,
            rename = "value-json",
            skip_serializing_if = "Option::is_none"
        )]
        value_json: Option<String>,
    },
    /// Remove the member at a pointer of the JSON value at `key`.
    RemoveJson {
        /// The key.
        key: String,
        /// RFC 6901 pointer (must exist).
        pointer: String,
    },
    /// Set a member of a frame-bytes value's header; the value is re-encoded
    /// with the new header length and padding, the payload unchanged.
    SetHeader {
        /// The key.
        key: String,
        /// RFC 6901 pointer into the header.
        pointer: String,
        /// The new value; exactly one of `value` and `value-json`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        /// The new value as JSON text (for a null, as in `set-json`).
        #[serde(
            default,
            rename = "value-json",
            skip_serializing_if = "Option::is_none"
        )]
        value_json: Option<String>,
    },
    /// Remove a member of a frame-bytes value's header (re-encoded as for
    /// `set-header`).
    RemoveHeader {
        /// The key.
        key: String,
        /// RFC 6901 pointer into the header (must exist).
        pointer: String,
    },
    /// Replace the one occurrence of `find` in a frame-bytes value's header
    /// text by `replace`, as text: a spelling `set-header` cannot make (a
    /// number as `1.5e20`, `007`, or JSON cut short). Re-encoded as for
    /// `set-header`.
    ReplaceHeaderText {
        /// The key.
        key: String,
        /// Text occurring exactly once in the header.
        find: String,
        /// What it becomes.
        replace: String,
    },
    /// Overwrite bytes at `offset` of the value (extending it, zero-filled,
    /// when needed).
    SetBytes {
        /// The key.
        key: String,
        /// Byte offset into the value.
        offset: u64,
        /// The bytes, as hex.
        hex: String,
    },
    /// Cut the value to `len` bytes (`len` must not exceed its length).
    Truncate {
        /// The key.
        key: String,
        /// The new length.
        len: u64,
    },
    /// Overwrite one row of a numeric column's buffer in a frame-bytes value,
    /// encoded as the column's dtype (little-endian). For a 1-D column the
    /// value is one element; for a column with trailing axes it is a list of
    /// `prod(shape[1..])` elements. An element is typed JSON: a number (or
    /// `"NaN"`, `"Infinity"`, `"-Infinity"`) for f64, an integer (or decimal
    /// string) for integer dtypes, `true`/`false` (or a raw byte 0..=255) for
    /// bool, `[re, im]` for c64/c128.
    SetCell {
        /// The key.
        key: String,
        /// The block name.
        block: String,
        /// The column name.
        column: String,
        /// The row (leading-axis index).
        row: u64,
        /// The new row value.
        value: Value,
    },
}

impl Edit {
    /// The edit's `op` name and key, for messages.
    fn describe(&self) -> (&'static str, &str) {
        match self {
            Edit::Put { key, .. } => ("put", key),
            Edit::Delete { key } => ("delete", key),
            Edit::SetJson { key, .. } => ("set-json", key),
            Edit::RemoveJson { key, .. } => ("remove-json", key),
            Edit::SetHeader { key, .. } => ("set-header", key),
            Edit::RemoveHeader { key, .. } => ("remove-header", key),
            Edit::ReplaceHeaderText { key, .. } => ("replace-header-text", key),
            Edit::SetBytes { key, .. } => ("set-bytes", key),
            Edit::Truncate { key, .. } => ("truncate", key),
            Edit::SetCell { key, .. } => ("set-cell", key),
        }
    }
}

/// A recipe that cannot be materialized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipeError {
    /// The index of the failing edit (`None`: the base or the file).
    pub edit: Option<usize>,
    /// What went wrong (names the edit when `edit` is set).
    pub message: String,
}

impl RecipeError {
    fn whole(message: impl Into<String>) -> RecipeError {
        RecipeError {
            edit: None,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for RecipeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RecipeError {}

/// Largest size (bytes) an edit may grow a value to: recipes build small
/// malformed files, and this bounds what a typo can allocate.
const MAX_VALUE_LEN: u64 = 1 << 30;

const MIB: u64 = 1 << 20;

/// Parses the recipe key spelling into raw key bytes.
pub fn parse_key(key: &str) -> Result<Vec<u8>, String> {
    match key {
        "meta" => return Ok(Key::Meta.encode()),
        "index" => return Ok(Key::Index.encode()),
        "ff" => return Ok(Key::ForceField.encode()),
        _ => {}
    }
    if let Some(hex) = key.strip_prefix("hex:") {
        let bytes = parse_hex(hex)?;
        if bytes.is_empty() {
            return Err("an empty key cannot be stored in LMDB".into());
        }
        return Ok(bytes);
    }
    let (prefix, number) = key.split_once(':').ok_or_else(|| {
        format!("key {key:?} is not meta, index, ff, r:<n>, s:<n>, f:<n> or hex:<bytes>")
    })?;
    let n: u64 = if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
        number
            .parse()
            .map_err(|_| format!("key {key:?}: {number} does not fit in u64"))?
    } else {
        return Err(format!("key {key:?}: {number:?} is not a decimal number"));
    };
    match prefix {
        "r" => Ok(Key::Record(n).encode()),
        "s" => Ok(Key::System(n).encode()),
        "f" => Ok(Key::Frame(n).encode()),
        _ => Err(format!(
            "key {key:?}: prefix {prefix:?} is not r, s, f or hex"
        )),
    }
}

/// Parses hex (pairs of hex digits; spaces and underscores between pairs are
/// ignored).
pub fn parse_hex(hex: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = hex
        .bytes()
        .filter(|b| !matches!(b, b' ' | b'_' | b'\n' | b'\t'))
        .collect();
    if digits.len() % 2 == 1 {
        return Err(format!("hex {hex:?} has an odd number of digits"));
    }
    digits
        .chunks_exact(2)
        .map(|pair| {
            let s = std::str::from_utf8(pair).map_err(|_| format!("hex {hex:?} is not ASCII"))?;
            u8::from_str_radix(s, 16).map_err(|_| format!("hex {hex:?}: {s:?} is not a hex byte"))
        })
        .collect()
}

/// Materializes `recipe` as an LMDB file at `out`.
///
/// An existing `out` (and `<out>-lock`) is removed first. For
/// [`Base::Fixture`], `load_fixture` gives the fixture's JSON (by its name
/// under `fixtures/`: the caller knows whether the fixtures are on disk or
/// embedded in the binary), handed to `write_base(json, out)`, which must
/// produce the file; for [`Base::Empty`], a new environment is created. The
/// edits are then applied in one write transaction (NO_SUB_DIR, map size at
/// least the file size + 64 MiB). The environment is closed before this
/// returns, so the file can be reopened by another opener in this process.
pub fn materialize(
    recipe: &Recipe,
    out: &Path,
    write_base: &mut dyn FnMut(&Value, &Path) -> Result<(), String>,
    load_fixture: &dyn Fn(&str) -> Result<Value, String>,
) -> Result<(), RecipeError> {
    remove_existing(out)?;

    let base_size = match &recipe.base {
        Base::Fixture(rel) => {
            let json = load_fixture(rel)
                .map_err(|e| RecipeError::whole(format!("base fixture {rel}: {e}")))?;
            write_base(&json, out).map_err(|e| {
                RecipeError::whole(format!("the writer refused base fixture {rel}: {e}"))
            })?;
            let md = std::fs::metadata(out).map_err(|e| {
                RecipeError::whole(format!(
                    "the writer of base fixture {rel} left no file at {}: {e}",
                    out.display()
                ))
            })?;
            if !md.is_file() {
                return Err(RecipeError::whole(format!(
                    "the writer of base fixture {rel} left {} that is not one file",
                    out.display()
                )));
            }
            md.len()
        }
        Base::Empty => 0,
    };

    // Room for the edits: twice their literal bytes (old pages stay live
    // until the commit), on top of the base and 64 MiB.
    let edit_bytes: u64 = recipe.edits.iter().map(edit_weight).sum();
    let map_size = base_size
        .saturating_add(64 * MIB)
        .saturating_add(edit_bytes.saturating_mul(2));
    let map_size = map_size.div_ceil(MIB).saturating_mul(MIB);
    let map_size = usize::try_from(map_size)
        .map_err(|_| RecipeError::whole("the file is too large to map"))?;

    let env = open_read_write(out, map_size).map_err(|e| {
        RecipeError::whole(format!(
            "cannot open {} as an LMDB file: {e}",
            out.display()
        ))
    })?;
    // The transaction (committed or aborted) ends inside `apply_edits`;
    // then the only handle is dropped and the close awaited.
    let result = apply_edits(&env, &recipe.edits);
    env.prepare_for_closing().wait();
    result
}

/// Bytes an edit may add to the file (at most [`MAX_VALUE_LEN`]).
fn edit_weight(edit: &Edit) -> u64 {
    let len = |s: &str| s.len() as u64;
    let weight = match edit {
        Edit::Put {
            json, hex, text, ..
        } => {
            json.as_ref().map_or(0, |j| len(&j.to_string()))
                + hex.as_deref().map_or(0, len)
                + text.as_deref().map_or(0, len)
        }
        Edit::SetJson {
            value, value_json, ..
        }
        | Edit::SetHeader {
            value, value_json, ..
        } => {
            value.as_ref().map_or(0, |v| len(&v.to_string())) + value_json.as_deref().map_or(0, len)
        }
        Edit::SetBytes { offset, hex, .. } => offset.saturating_add(len(hex)),
        Edit::ReplaceHeaderText { replace, .. } => len(replace),
        _ => 0,
    };
    weight.min(MAX_VALUE_LEN)
}

fn remove_existing(out: &Path) -> Result<(), RecipeError> {
    let remove = |p: &Path| -> Result<(), RecipeError> {
        match std::fs::symlink_metadata(p) {
            Ok(md) if md.is_dir() => std::fs::remove_dir_all(p),
            Ok(_) => std::fs::remove_file(p),
            Err(_) => Ok(()),
        }
        .map_err(|e| RecipeError::whole(format!("cannot remove {}: {e}", p.display())))
    };
    remove(out)?;
    let mut lock = out.as_os_str().to_owned();
    lock.push("-lock");
    remove(Path::new(&lock))
}

fn open_read_write(path: &Path, map_size: usize) -> heed::Result<Env> {
    let mut options = EnvOpenOptions::new();
    options.map_size(map_size);
    // SAFETY: the recipe's file is private to this call: it was just created
    // (by the caller's writer or here) and nobody else opens it until
    // `materialize` returns; heed refuses a second open of one path in this
    // process.
    unsafe {
        options.flags(EnvFlags::NO_SUB_DIR);
        options.open(path)
    }
}

fn apply_edits(env: &Env, edits: &[Edit]) -> Result<(), RecipeError> {
    let mut wtxn = env
        .write_txn()
        .map_err(|e| RecipeError::whole(format!("cannot begin a write transaction: {e}")))?;
    let db: Database<Bytes, Bytes> = env
        .create_database(&mut wtxn, None)
        .map_err(|e| RecipeError::whole(format!("cannot open the unnamed database: {e}")))?;
    for (i, edit) in edits.iter().enumerate() {
        apply_edit(db, &mut wtxn, edit).map_err(|message| {
            let (op, key) = edit.describe();
            RecipeError {
                edit: Some(i),
                message: format!("edit {i} ({op} {key}): {message}"),
            }
        })?;
    }
    wtxn.commit()
        .map_err(|e| RecipeError::whole(format!("cannot commit the edits: {e}")))
}

/// The value a `set-json` or `set-header` edit sets, from its one of
/// `value` and `value-json`.
fn new_value(value: &Option<Value>, value_json: &Option<String>) -> Result<Value, String> {
    match (value, value_json) {
        (Some(value), None) => Ok(value.clone()),
        (None, Some(text)) => {
            serde_json::from_str(text).map_err(|e| format!("value-json {text:?} is not JSON: {e}"))
        }
        (Some(_), Some(_)) => Err("both value and value-json are given; give one".into()),
        (None, None) => Err("neither value nor value-json is given".into()),
    }
}

fn get_value(db: Database<Bytes, Bytes>, wtxn: &RwTxn, key: &[u8]) -> Result<Vec<u8>, String> {
    match db.get(wtxn, key) {
        Ok(Some(v)) => Ok(v.to_vec()),
        Ok(None) => Err("the key is not in the file".into()),
        Err(e) => Err(format!("cannot read the key: {e}")),
    }
}

fn put_value(
    db: Database<Bytes, Bytes>,
    wtxn: &mut RwTxn,
    key: &[u8],
    value: &[u8],
) -> Result<(), String> {
    db.put(wtxn, key, value)
        .map_err(|e| format!("cannot write the key: {e}"))
}

fn apply_edit(db: Database<Bytes, Bytes>, wtxn: &mut RwTxn, edit: &Edit) -> Result<(), String> {
    let key = parse_key(edit.describe().1)?;
    match edit {
        Edit::Put {
            json, hex, text, ..
        } => {
            let value = match (json, hex, text) {
                (Some(json), None, None) => serde_json::to_vec(json).map_err(|e| e.to_string())?,
                (None, Some(hex), None) => parse_hex(hex)?,
                (None, None, Some(text)) => text.as_bytes().to_vec(),
                _ => return Err("a put takes exactly one of json, hex and text".into()),
            };
            put_value(db, wtxn, &key, &value)
        }
        Edit::Delete { .. } => match db.delete(wtxn, &key) {
            Ok(true) => Ok(()),
            Ok(false) => Err("the key is not in the file".into()),
            Err(e) => Err(format!("cannot delete the key: {e}")),
        },
        Edit::SetJson {
            pointer,
            value,
            value_json,
            ..
        } => {
            let value = new_value(value, value_json)?;
            let mut doc = read_json(&get_value(db, wtxn, &key)?)?;
            set_pointer(&mut doc, pointer, value)?;
            put_value(
                db,
                wtxn,
                &key,
                &serde_json::to_vec(&doc).map_err(|e| e.to_string())?,
            )
        }
        Edit::RemoveJson { pointer, .. } => {
            let mut doc = read_json(&get_value(db, wtxn, &key)?)?;
            remove_pointer(&mut doc, pointer)?;
            put_value(
                db,
                wtxn,
                &key,
                &serde_json::to_vec(&doc).map_err(|e| e.to_string())?,
            )
        }
        Edit::SetHeader {
            pointer,
            value,
            value_json,
            ..
        } => {
            let value = new_value(value, value_json)?;
            let old = get_value(db, wtxn, &key)?;
            let new = edit_header(&old, |header| set_pointer(header, pointer, value))?;
            put_value(db, wtxn, &key, &new)
        }
        Edit::RemoveHeader { pointer, .. } => {
            let old = get_value(db, wtxn, &key)?;
            let new = edit_header(&old, |header| remove_pointer(header, pointer))?;
            put_value(db, wtxn, &key, &new)
        }
        Edit::ReplaceHeaderText { find, replace, .. } => {
            let old = get_value(db, wtxn, &key)?;
            let view = frame_bytes::parse_ignoring_magic(&old)
                .map_err(|p| format!("the value's header cannot be parsed: {}", p.message))?;
            let text = String::from_utf8_lossy(&view.value[8..8 + view.header_len]);
            match text.matches(find.as_str()).count() {
                1 => {}
                n => return Err(format!("`{find}` occurs {n} times in the header, not once")),
            }
            let new = frame_bytes::reencode_text(
                &view,
                text.replacen(find.as_str(), replace, 1).as_bytes(),
            )?;
            put_value(db, wtxn, &key, &new)
        }
        Edit::SetBytes { offset, hex, .. } => {
            let mut value = get_value(db, wtxn, &key)?;
            let bytes = parse_hex(hex)?;
            let end = offset
                .checked_add(bytes.len() as u64)
                .filter(|&end| end <= MAX_VALUE_LEN)
                .ok_or_else(|| format!("offset {offset} + {} bytes is too large", bytes.len()))?;
            let (start, end) = (*offset as usize, end as usize);
            if value.len() < end {
                value.resize(end, 0);
            }
            value[start..end].copy_from_slice(&bytes);
            put_value(db, wtxn, &key, &value)
        }
        Edit::Truncate { len, .. } => {
            let mut value = get_value(db, wtxn, &key)?;
            if *len > value.len() as u64 {
                return Err(format!(
                    "cannot truncate a {}-byte value to {len} bytes",
                    value.len()
                ));
            }
            value.truncate(*len as usize);
            put_value(db, wtxn, &key, &value)
        }
        Edit::SetCell {
            block,
            column,
            row,
            value,
            ..
        } => {
            let mut bytes = get_value(db, wtxn, &key)?;
            set_cell(&mut bytes, block, column, *row, value)?;
            put_value(db, wtxn, &key, &bytes)
        }
    }
}

fn read_json(bytes: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("the value is not JSON: {e}"))
}

/// Decodes an RFC 6901 pointer into its reference tokens.
fn pointer_tokens(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("pointer {pointer:?} does not start with '/'"));
    };
    rest.split('/')
        .map(|t| {
            // `~1` then `~0`, per RFC 6901 §4; any other `~` escape is invalid.
            let mut out = String::with_capacity(t.len());
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(format!("pointer {pointer:?} has a bad '~' escape")),
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

fn array_index(token: &str, len: usize, allow_end: bool) -> Option<usize> {
    if allow_end && token == "-" {
        return Some(len);
    }
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let i: usize = token.parse().ok()?;
    if i < len || (allow_end && i == len) {
        Some(i)
    } else {
        None
    }
}

/// The container holding the pointer's last token, and that token.
fn parent_of<'v>(
    doc: &'v mut Value,
    pointer: &str,
) -> Result<Option<(&'v mut Value, String)>, String> {
    let mut tokens = pointer_tokens(pointer)?;
    let Some(last) = tokens.pop() else {
        return Ok(None);
    };
    let mut at = doc;
    for t in &tokens {
        at = match at {
            Value::Object(map) => map.get_mut(t),
            Value::Array(list) => {
                let len = list.len();
                array_index(t, len, false).and_then(|i| list.get_mut(i))
            }
            _ => None,
        }
        .ok_or_else(|| format!("pointer {pointer:?}: no member {t:?} to descend into"))?;
    }
    Ok(Some((at, last)))
}

/// Sets the value at `pointer`, creating the last member when absent.
pub fn set_pointer(doc: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    match parent_of(doc, pointer)? {
        None => {
            *doc = value;
            Ok(())
        }
        Some((Value::Object(map), last)) => {
            map.insert(last, value);
            Ok(())
        }
        Some((Value::Array(list), last)) => {
            let i = array_index(&last, list.len(), true).ok_or_else(|| {
                format!(
                    "pointer {pointer:?}: {last:?} is not an index of a list of {}",
                    list.len()
                )
            })?;
            if i == list.len() {
                list.push(value);
            } else {
                list[i] = value;
            }
            Ok(())
        }
        Some((other, _)) => Err(format!(
            "pointer {pointer:?}: the parent is {}, not an object or list",
            frame_bytes::json_kind(other)
        )),
    }
}

/// Removes the member at `pointer` (it must exist).
pub fn remove_pointer(doc: &mut Value, pointer: &str) -> Result<(), String> {
    match parent_of(doc, pointer)? {
        None => Err("the empty pointer names the whole document, which cannot be removed".into()),
        Some((Value::Object(map), last)) => map
            .remove(&last)
            .map(|_| ())
            .ok_or_else(|| format!("pointer {pointer:?}: no member {last:?}")),
        Some((Value::Array(list), last)) => {
            let i = array_index(&last, list.len(), false)
                .ok_or_else(|| format!("pointer {pointer:?}: no element {last:?}"))?;
            list.remove(i);
            Ok(())
        }
        Some((other, _)) => Err(format!(
            "pointer {pointer:?}: the parent is {}, not an object or list",
            frame_bytes::json_kind(other)
        )),
    }
}

/// Edits the header of a frame-bytes value and re-encodes it (same magic
/// bytes, new header length, zero padding, payload unchanged).
fn edit_header(
    old: &[u8],
    edit: impl FnOnce(&mut Value) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    let view = frame_bytes::parse_ignoring_magic(old)
        .map_err(|p| format!("the value's header cannot be parsed: {}", p.message))?;
    let mut header = Value::Object(view.header.clone());
    edit(&mut header)?;
    let Value::Object(header) = header else {
        return Err("the edited header is not a JSON object".into());
    };
    frame_bytes::reencode(&view, &header)
}

fn set_cell(
    value: &mut [u8],
    block: &str,
    column: &str,
    row: u64,
    cell: &Value,
) -> Result<(), String> {
    let view = frame_bytes::parse_ignoring_magic(value)
        .map_err(|p| format!("the value's header cannot be parsed: {}", p.message))?;
    let layout = frame_bytes::column_layout(&view.header, block, column)?;
    if layout.item_size.is_none() {
        return Err(format!(
            "column `{block}.{column}` is a string column (edit its header values instead)"
        ));
    }
    let range = layout.buffer_range(&view).ok_or_else(|| {
        format!("the buffer of column `{block}.{column}` does not lie within the value")
    })?;
    let rows = layout.shape[0];
    if row >= rows {
        return Err(format!(
            "row {row} is out of range: column `{block}.{column}` has {rows} rows"
        ));
    }
    let per_row = layout.shape[1..].iter().product::<u64>();
    let elements: Vec<&Value> = if layout.shape.len() == 1 {
        vec![cell]
    } else {
        match cell {
            Value::Array(items) if items.len() as u64 == per_row => items.iter().collect(),
            _ => {
                return Err(format!(
                    "column `{block}.{column}` has {per_row} elements per row: give a list of that length"
                ))
            }
        }
    };
    let mut encoded = Vec::new();
    for e in elements {
        encode_element(&layout.dtype, e, &mut encoded)?;
    }
    // The buffer lies within the value, so these products cannot overflow.
    let row_bytes = encoded.len();
    let start = range.start + (row as usize) * row_bytes;
    value[start..start + row_bytes].copy_from_slice(&encoded);
    Ok(())
}

fn encode_element(dtype: &str, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let bad = || format!("{v} is not a {dtype} value");
    match frame_bytes::dtype_kind(dtype) {
        Some(DtypeKind::Buffer(_)) => {}
        _ => return Err(format!("dtype {dtype:?} has no buffer")),
    }
    match dtype {
        "f64" => out.extend_from_slice(&to_f64(v).ok_or_else(bad)?.to_le_bytes()),
        "c64" | "c128" => {
            let parts = v
                .as_array()
                .filter(|p| p.len() == 2)
                .ok_or_else(|| format!("{v} is not a [re, im] pair"))?;
            for part in parts {
                let x = to_f64(part).ok_or_else(bad)?;
                if dtype == "c64" {
                    out.extend_from_slice(&(x as f32).to_le_bytes());
                } else {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
        "bool" => {
            let byte = match v {
                Value::Bool(b) => u8::from(*b),
                Value::Number(n) => n
                    .as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(bad)?,
                _ => return Err(bad()),
            };
            out.push(byte);
        }
        _ => {
            let n = to_i128(v).ok_or_else(bad)?;
            let fits = |lo: i128, hi: i128| {
                if (lo..=hi).contains(&n) {
                    Ok(())
                } else {
                    Err(format!("{n} is out of range for {dtype}"))
                }
            };
            match dtype {
                "i8" => fits(i8::MIN.into(), i8::MAX.into()).map(|_| out.push(n as i8 as u8))?,
                "u8" => fits(0, u8::MAX.into()).map(|_| out.push(n as u8))?,
                "i16" => fits(i16::MIN.into(), i16::MAX.into())
                    .map(|_| out.extend_from_slice(&(n as i16).to_le_bytes()))?,
                "u16" => fits(0, u16::MAX.into())
                    .map(|_| out.extend_from_slice(&(n as u16).to_le_bytes()))?,
                "i32" => fits(i32::MIN.into(), i32::MAX.into())
                    .map(|_| out.extend_from_slice(&(n as i32).to_le_bytes()))?,
                "u32" => fits(0, u32::MAX.into())
                    .map(|_| out.extend_from_slice(&(n as u32).to_le_bytes()))?,
                "i64" => fits(i64::MIN.into(), i64::MAX.into())
                    .map(|_| out.extend_from_slice(&(n as i64).to_le_bytes()))?,
                "u64" => fits(0, u64::MAX.into())
                    .map(|_| out.extend_from_slice(&(n as u64).to_le_bytes()))?,
                _ => return Err(format!("dtype {dtype:?} is not settable")),
            }
        }
    }
    Ok(())
}

fn to_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn to_i128(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s.parse::<i128>().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Materializes `edits` on an empty file and returns the value then
    /// stored at `key` (recipe spelling), or the recipe's error.
    fn stored_after(name: &str, edits: &str, key: &str) -> Result<Vec<u8>, RecipeError> {
        let dir =
            std::env::temp_dir().join(format!("harness-recipe-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("edited.mrec.lmdb");
        let recipe = Recipe::from_toml(&format!("base = \"empty\"\nedits = [{edits}]"))?;
        let mut no_writer = |_: &Value, _: &Path| -> Result<(), String> { unreachable!() };
        let no_fixtures = |name: &str| -> Result<Value, String> { Err(format!("no {name}")) };
        let made = materialize(&recipe, &out, &mut no_writer, &no_fixtures);
        let stored = made.map(|()| {
            let mut options = EnvOpenOptions::new();
            // SAFETY: valid flags for a read-only open of the file just
            // made, which nothing else opens.
            unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
            // SAFETY: as above; closed before the directory is removed.
            let env = unsafe { options.open(&out) }.unwrap();
            let rtxn = env.read_txn().unwrap();
            let db: Database<Bytes, Bytes> = env.open_database(&rtxn, None).unwrap().unwrap();
            let key = parse_key(key).unwrap();
            db.get(&rtxn, &key).unwrap().unwrap().to_vec()
        });
        std::fs::remove_dir_all(&dir).unwrap();
        stored
    }

    /// `meta` = `{"a": 1}`, then `edit`: what `meta` holds after.
    fn meta_after(name: &str, edit: &str) -> Result<Value, RecipeError> {
        let put = "{ op = \"put\", key = \"meta\", text = '{\"a\":1}' }";
        let meta = stored_after(name, &format!("{put}, {edit}"), "meta")?;
        Ok(serde_json::from_slice(&meta).unwrap())
    }

    /// `value-json` sets what TOML cannot spell (a null, and a null inside
    /// an object); `value` sets the rest as before.
    #[test]
    fn value_json_sets_a_null_where_value_cannot() {
        let set = |pointer: &str, field: &str| {
            let edit = format!(
                "{{ op = \"set-json\", key = \"meta\", pointer = \"{pointer}\", {field} }}"
            );
            meta_after(
                &format!("set{}-{}", pointer.replace('/', "-"), field.len()),
                &edit,
            )
            .unwrap()
        };
        assert_eq!(
            set("/a", "value-json = 'null'"),
            serde_json::json!({"a": null})
        );
        assert_eq!(
            set("/b", "value-json = '{\"fill\": null}'"),
            serde_json::json!({"a": 1, "b": {"fill": null}})
        );
        assert_eq!(
            set("/a", "value = \"null\""),
            serde_json::json!({"a": "null"})
        );
    }

    /// A `set-json` with both or neither of `value` and `value-json`, or
    /// with text that is not JSON, is refused, naming the edit.
    #[test]
    fn value_and_value_json_are_one_or_the_other() {
        for (name, fields, says) in [
            (
                "both",
                "value = 1, value-json = '2'",
                "both value and value-json",
            ),
            ("neither", "", "neither value nor value-json"),
            ("not-json", "value-json = 'nul'", "is not JSON"),
        ] {
            let fields = if fields.is_empty() {
                String::new()
            } else {
                format!(", {fields}")
            };
            let edit = format!("{{ op = \"set-json\", key = \"meta\", pointer = \"/a\"{fields} }}");
            let e = meta_after(name, &edit).unwrap_err();
            assert_eq!(e.edit, Some(1), "{name}: {e}");
            assert!(
                e.message.starts_with("edit 1 (set-json meta): "),
                "{name}: {e}"
            );
            assert!(e.message.contains(says), "{name}: {e}");
        }
    }

    /// `set-header` takes `value-json` too: a null in a frame's header.
    #[test]
    fn value_json_sets_a_null_in_a_frame_header() {
        // MRF1, the header's length, the header, padding to 8 bytes.
        let header = br#"{"blocks":{},"meta":{"pe":1.5}}"#;
        let mut frame = b"MRF1".to_vec();
        frame.extend_from_slice(&(header.len() as u32).to_le_bytes());
        frame.extend_from_slice(header);
        frame.resize(frame.len().next_multiple_of(8), b' ');
        let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
        let edits = format!(
            "{{ op = \"put\", key = \"f:0\", hex = \"{hex}\" }}, \
             {{ op = \"set-header\", key = \"f:0\", pointer = \"/meta/pe\", value-json = 'null' }}"
        );
        let stored = stored_after("set-header", &edits, "f:0").unwrap();
        let len = u32::from_le_bytes(stored[4..8].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&stored[8..8 + len]).unwrap();
        assert_eq!(
            header,
            serde_json::json!({"blocks": {}, "meta": {"pe": null}})
        );
    }
}
