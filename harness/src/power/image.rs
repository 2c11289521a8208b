//! A collection file as a map of its keys to their values, which a
//! simulated writer bug edits and writes back as a new LMDB file (through
//! heed, as recipes do; never through an implementation).

use std::collections::BTreeMap;
use std::path::Path;

use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use serde_json::{Map, Value};

use crate::inspect::frame_bytes::{self, column_layout, DtypeKind};
use crate::inspect::Key;

/// Every key of a file and its value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Keys in byte order, as LMDB keeps them.
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
    /// How the environment is laid out when written.
    pub layout: EnvLayout,
}

/// How [`Image::write`] lays the environment out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EnvLayout {
    /// One file, the unnamed database (the binding's).
    #[default]
    OneFile,
    /// One file, every key in the named database `mrec`.
    NamedDatabase,
    /// A directory holding `data.mdb` (LMDB's default, `subdir=True`).
    Directory,
}

/// A frame-bytes value taken apart: its header, and each buffer of its
/// payload by what it belongs to, so that a bug can change either and lay
/// the value out again.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The header, its `offset`s and `validity` offsets as stored.
    pub header: Map<String, Value>,
    /// `(block, column, is the mask)` -> the buffer's bytes.
    pub buffers: BTreeMap<(String, String, bool), Vec<u8>>,
}

impl Image {
    /// Reads every entry of the file at `path`.
    pub fn read(path: &Path) -> Result<Image, String> {
        let env = open(path, None)?;
        let result = (|| {
            let rtxn = env.read_txn().map_err(|e| e.to_string())?;
            let db: Database<Bytes, Bytes> = env
                .open_database(&rtxn, None)
                .map_err(|e| e.to_string())?
                .ok_or("no unnamed database")?;
            let mut entries = BTreeMap::new();
            for item in db.iter(&rtxn).map_err(|e| e.to_string())? {
                let (k, v) = item.map_err(|e| e.to_string())?;
                entries.insert(k.to_vec(), v.to_vec());
            }
            Ok(Image {
                entries,
                layout: EnvLayout::OneFile,
            })
        })();
        env.prepare_for_closing().wait();
        result
    }

    /// Writes the entries as a new file at `path` (replacing any).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        crate::runner::remove_file_and_lock(path);
        let _ = std::fs::remove_dir_all(path);
        if self.layout == EnvLayout::Directory {
            std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let env = open(path, Some(self.layout))?;
        let result = (|| {
            let mut wtxn = env.write_txn().map_err(|e| e.to_string())?;
            let name = (self.layout == EnvLayout::NamedDatabase).then_some("mrec");
            let db: Database<Bytes, Bytes> = env
                .create_database(&mut wtxn, name)
                .map_err(|e| e.to_string())?;
            for (k, v) in &self.entries {
                db.put(&mut wtxn, k, v).map_err(|e| e.to_string())?;
            }
            wtxn.commit().map_err(|e| e.to_string())
        })();
        env.prepare_for_closing().wait();
        result
    }

    /// The value under `key`.
    pub fn get(&self, key: Key) -> Option<&Vec<u8>> {
        self.entries.get(&key.encode())
    }

    /// `meta` as JSON (`Null` when missing or not JSON).
    pub fn meta(&self) -> Value {
        self.get(Key::Meta)
            .and_then(|v| serde_json::from_slice(v).ok())
            .unwrap_or(Value::Null)
    }

    /// Replaces `meta`.
    pub fn set_meta(&mut self, meta: &Value) {
        self.entries
            .insert(Key::Meta.encode(), meta.to_string().into_bytes());
    }

    /// The frame under `key`, taken apart.
    pub fn frame(&self, key: Key) -> Option<Frame> {
        Frame::parse(self.get(key)?)
    }

    /// Lays `frame` out again under `key`.
    pub fn set_frame(&mut self, key: Key, frame: &Frame) {
        self.entries.insert(key.encode(), frame.encode(8, true));
    }

    /// Applies `edit` to the header of every frame key holding `prefix`
    /// (`f`, `s`), keeping the payload; whether any header changed.
    pub fn edit_headers(
        &mut self,
        prefix: u8,
        mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
    ) -> bool {
        let mut changed = false;
        for (k, v) in self.entries.iter_mut() {
            if k.len() != 9 || k[0] != prefix {
                continue;
            }
            let Ok(view) = frame_bytes::parse(v) else {
                continue;
            };
            let mut header = view.header.clone();
            if edit(&mut header) {
                if let Ok(new) = frame_bytes::reencode(&view, &header) {
                    *v = new;
                    changed = true;
                }
            }
        }
        changed
    }

    /// The records' frame ranges, from the index: `(first_frame, n_frames)`.
    pub fn spans(&self) -> Vec<(u64, u64)> {
        let Some(index) = self.get(Key::Index) else {
            return Vec::new();
        };
        let Ok(view) = frame_bytes::parse(index) else {
            return Vec::new();
        };
        let first = frame_bytes::read_u64_column(&view, "records", "first_frame");
        let n = frame_bytes::read_u64_column(&view, "records", "n_frames");
        match (first, n) {
            (Some(first), Some(n)) => first.into_iter().zip(n).collect(),
            _ => Vec::new(),
        }
    }

    /// The headers of record `r`'s updates, in order.
    pub fn updates(&self, span: (u64, u64)) -> Vec<Map<String, Value>> {
        (span.0..span.0 + span.1)
            .filter_map(|j| Some(self.frame(Key::Frame(j))?.header))
            .collect()
    }

    /// The index's u64 column `name`.
    pub fn index_u64(&self, name: &str) -> Option<Vec<u64>> {
        let frame = self.frame(Key::Index)?;
        let bytes = frame.buffers.get(&("records".into(), name.into(), false))?;
        Some(
            bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect(),
        )
    }

    /// Replaces the index's u64 column `name`; whether it changed.
    pub fn set_index_u64(&mut self, name: &str, values: &[u64]) -> bool {
        let Some(mut frame) = self.frame(Key::Index) else {
            return false;
        };
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let slot = ("records".to_string(), name.to_string(), false);
        if frame.buffers.get(&slot) == Some(&bytes) {
            return false;
        }
        frame.buffers.insert(slot, bytes);
        self.set_frame(Key::Index, &frame);
        true
    }

    /// Moves the value of `from` to `to` (nothing when `from` is absent).
    pub fn rename(&mut self, from: &[u8], to: Vec<u8>) {
        if let Some(v) = self.entries.remove(from) {
            self.entries.insert(to, v);
        }
    }
}

/// Opens `path` read-only (`None`) or to write it in `layout`.
fn open(path: &Path, layout: Option<EnvLayout>) -> Result<heed::Env, String> {
    let mut options = EnvOpenOptions::new();
    options.map_size(1 << 30).max_dbs(1);
    // SAFETY: the file is this engine's own scratch file: created by a
    // writer the engine called, or here, and opened by nobody else until
    // the environment is closed (`prepare_for_closing().wait()` above).
    unsafe {
        options.flags(match layout {
            None => EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY,
            Some(EnvLayout::Directory) => EnvFlags::NO_SYNC,
            Some(_) => EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC,
        });
        options.open(path)
    }
    .map_err(|e| format!("{}: {e}", path.display()))
}

impl Frame {
    /// Takes a frame-bytes value apart; `None` when it does not parse or a
    /// buffer lies outside it.
    pub fn parse(value: &[u8]) -> Option<Frame> {
        let view = frame_bytes::parse(value).ok()?;
        let mut buffers = BTreeMap::new();
        for (block, entry) in view.blocks()? {
            for (column, c) in entry.get("columns")?.as_object()? {
                let layout = column_layout(&view.header, block, column).ok()?;
                if layout.item_size.is_some() {
                    let range = layout.buffer_range(&view)?;
                    buffers.insert(
                        (block.clone(), column.clone(), false),
                        value[range].to_vec(),
                    );
                }
                if let Some(offset) = c.get("validity").and_then(Value::as_u64) {
                    let rows = *layout.shape.first()? as usize;
                    let start = view.payload_start + offset as usize;
                    let mask = value.get(start..start + rows)?;
                    buffers.insert((block.clone(), column.clone(), true), mask.to_vec());
                }
            }
        }
        Some(Frame {
            header: view.header,
            buffers,
        })
    }

    /// The frame's bytes: its header with every offset set to where its
    /// buffer lands, each buffer starting at a multiple of `align` (8 in a
    /// conforming value), the payload after `padding` to 8 (or none).
    pub fn encode(&self, align: usize, padding: bool) -> Vec<u8> {
        let mut header = self.header.clone();
        let mut payload = Vec::new();
        for ((block, column, mask), bytes) in &self.buffers {
            payload.resize(payload.len().next_multiple_of(align), 0);
            let at = payload.len() as u64;
            payload.extend_from_slice(bytes);
            let entry = header
                .get_mut("blocks")
                .and_then(|b| b.get_mut(block))
                .and_then(|b| b.get_mut("columns"))
                .and_then(|c| c.get_mut(column))
                .and_then(Value::as_object_mut);
            if let Some(entry) = entry {
                entry.insert(
                    if *mask { "validity" } else { "offset" }.into(),
                    Value::from(at),
                );
            }
        }
        let json = Value::Object(header).to_string();
        let mut out = Vec::with_capacity(16 + json.len() + payload.len());
        out.extend_from_slice(frame_bytes::MAGIC);
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(json.as_bytes());
        if padding {
            out.resize(out.len().next_multiple_of(8), 0);
        }
        out.extend_from_slice(&payload);
        out
    }

    /// The item size of column `block.column` (`None` for a string column).
    pub fn item_size(&self, block: &str, column: &str) -> Option<usize> {
        let dtype = self
            .header
            .get("blocks")?
            .get(block)?
            .get("columns")?
            .get(column)?
            .get("dtype")?
            .as_str()?;
        match frame_bytes::dtype_kind(dtype)? {
            DtypeKind::Buffer(n) => Some(n as usize),
            DtypeKind::String => None,
        }
    }

    /// The dtype of column `block.column`.
    pub fn dtype(&self, block: &str, column: &str) -> Option<String> {
        Some(
            self.header
                .get("blocks")?
                .get(block)?
                .get("columns")?
                .get(column)?
                .get("dtype")?
                .as_str()?
                .to_string(),
        )
    }
}
