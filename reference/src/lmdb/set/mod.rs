//! Sharded collections: many `.mrec.lmdb` files that share one declaration
//! (units, `sequence_schema`, force field), read as one ([`Set`]). This is
//! this project's extension, not part of the binding (docs/shards.md):
//! every shard is a conforming collection on its own, and nothing here
//! writes into one.
//!
//! Numbering: record `r` of the set is record `r - record_start(s)` of the
//! shard `s` whose range holds it, frame `j` likewise with the frames
//! (prefix sums of the shards' counts, each read once from the shard's
//! `meta`, or from the manifest). No record is decoded to open a set.
//!
//! Opening: from files (each opened: counts, declaration compared with the
//! first shard's; a shard that differs is refused naming it and the first
//! place its declaration differs), or from a manifest
//! ([`Manifest`], `mrec-set.json`): every shard's size is checked against
//! it (a missing one refused by name), and a shard opens when first read,
//! its counts and declaration digest checked against the manifest then.
//! So thousands of shards open from one small file.

mod declaration;
mod manifest;
mod source;
mod verify;

pub use manifest::{
    Manifest, ManifestShard, MANIFEST_FORMAT, MANIFEST_VERSION, MAX_MANIFEST_BYTES,
};
pub use source::{
    is_manifest_name, resolve, shard_files, Source, MANIFEST_NAME, PENDING_NAME, SHARD_SUFFIX,
};
pub use verify::{sidecar_manifest, verify_digests, ShardCheck, SIDECAR_SUFFIX};

use super::{Reader, RecordTxn, ResolvedFrame};
use crate::arrays::RecordArrays;
use crate::clause::Clause;
use crate::error::{Error, Result, SetProblem};
use crate::model::*;
use declaration::{first_difference, Declaration};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::OnceLock;

/// How a set opens its shards.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetOptions {
    /// Check each shard's LMDB pages before LMDB maps it
    /// ([`Reader::open_checked`]): for shards from elsewhere.
    pub checked: bool,
}

/// One shard as the set knows it without opening it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// The file.
    pub path: PathBuf,
    /// Records in it.
    pub n_records: u64,
    /// Frames in it.
    pub n_frames: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

struct Shard {
    info: ShardInfo,
    reader: OnceLock<Reader>,
    /// Its declaration, once it was opened.
    declaration: OnceLock<Declaration>,
}

/// A sharded collection read as one (see the module's documentation).
/// `Sync`: shards open on first use from any thread.
pub struct Set {
    shards: Vec<Shard>,
    /// `record_starts[s]`: the set's number of shard `s`'s first record;
    /// one more entry, the total.
    record_starts: Vec<u64>,
    frame_starts: Vec<u64>,
    /// SHA-256 of the declaration every shard has.
    digest: String,
    options: SetOptions,
    manifest: Option<PathBuf>,
}

impl std::fmt::Debug for Set {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Set")
            .field("shards", &self.shards.len())
            .field("records", &self.n_records())
            .field("frames", &self.n_frames())
            .field("manifest", &self.manifest)
            .finish()
    }
}

/// A frame of a set ([`Set::frames`]): the shard's resolved frame and its
/// numbers in the set.
pub struct SetFrame<'a, 't> {
    /// The shard it is in.
    pub shard: usize,
    /// Its record, numbered in the set.
    pub record: u64,
    /// Its ordinal in the set.
    pub ordinal: u64,
    /// The frame as its shard resolves it (`frame.record` is the shard's
    /// number of the record, `frame.position` the frame's in it).
    pub frame: &'a ResolvedFrame<'t>,
}

/// How messages name a shard: its file name.
fn shard_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

impl Set {
    /// Opens the set `specs` name ([`resolve`]: files, a directory, a
    /// manifest, a glob pattern, in a stable order).
    pub fn open(specs: &[PathBuf], options: SetOptions) -> Result<Set> {
        match resolve(specs)? {
            Source::Files(files) => Set::open_files(&files, options),
            Source::Manifest(path) => Set::open_manifest(&path, options),
        }
    }

    /// Opens every file (in this order): its counts and declaration, which
    /// must be the first shard's.
    pub fn open_files(paths: &[PathBuf], options: SetOptions) -> Result<Set> {
        if paths.is_empty() {
            return Err(Error::set(SetProblem::Empty, "", "no shard given"));
        }
        let mut seen = HashSet::with_capacity(paths.len());
        let mut shards = Vec::with_capacity(paths.len());
        let mut first: Option<(String, Declaration)> = None;
        for path in paths {
            let canonical = std::fs::canonicalize(path).map_err(|e| Error::io_at(path, e))?;
            if !seen.insert(canonical) {
                return Err(Error::set(
                    SetProblem::Duplicate,
                    shard_name(path),
                    format!("{} is listed twice", path.display()),
                ));
            }
            let reader = open_reader(path, options)?;
            let declaration = Declaration::of(&reader).map_err(|e| e.in_shard(path))?;
            match &first {
                None => first = Some((shard_name(path), declaration.clone())),
                Some((name, decl)) if decl.sha256 != declaration.sha256 => {
                    let what = first_difference(&declaration.value, &decl.value)
                        .unwrap_or_else(|| "their digests differ".into());
                    return Err(Error::set(
                        SetProblem::Declaration,
                        shard_name(path),
                        format!(
                            "its declaration differs from {name}'s (the set's first shard): {what}"
                        ),
                    ));
                }
                Some(_) => {}
            }
            let bytes = std::fs::metadata(path)
                .map_err(|e| Error::io_at(path, e))?
                .len();
            let info = ShardInfo {
                path: path.clone(),
                n_records: reader.n_records(),
                n_frames: reader.n_frames(),
                bytes,
            };
            shards.push(Shard {
                info,
                reader: OnceLock::from(reader),
                declaration: OnceLock::from(declaration),
            });
        }
        let digest = first.map(|(_, d)| d.sha256).unwrap_or_default();
        Ok(Set::assemble(shards, digest, options, None))
    }

    /// Opens the set a manifest lists: each shard's size is checked now
    /// (a missing or resized shard is refused by name), and the shard
    /// opens when first read (its counts and declaration checked then).
    pub fn open_manifest(path: &Path, options: SetOptions) -> Result<Set> {
        let manifest = Manifest::read(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let infos: Vec<ShardInfo> = manifest
            .shards
            .iter()
            .map(|s| ShardInfo {
                path: dir.join(&s.file),
                n_records: s.n_records,
                n_frames: s.n_frames,
                bytes: s.bytes,
            })
            .collect();
        for info in &infos {
            check_size(info)?;
        }
        let mut set = Set::from_parts(infos, manifest.declaration_sha256, options)?;
        set.manifest = Some(path.to_path_buf());
        Ok(set)
    }

    /// A set of shards already described (by a manifest, or by a set
    /// opened in another process: what a loader worker gets), none opened
    /// or looked at until read; each is checked against its description
    /// when it opens.
    pub fn from_parts(
        shards: Vec<ShardInfo>,
        declaration_sha256: String,
        options: SetOptions,
    ) -> Result<Set> {
        if shards.is_empty() {
            return Err(Error::set(SetProblem::Empty, "", "no shard given"));
        }
        let shards = shards
            .into_iter()
            .map(|info| Shard {
                info,
                reader: OnceLock::new(),
                declaration: OnceLock::new(),
            })
            .collect();
        Ok(Set::assemble(shards, declaration_sha256, options, None))
    }

    fn assemble(
        shards: Vec<Shard>,
        digest: String,
        options: SetOptions,
        manifest: Option<PathBuf>,
    ) -> Set {
        let mut record_starts = Vec::with_capacity(shards.len() + 1);
        let mut frame_starts = Vec::with_capacity(shards.len() + 1);
        let (mut records, mut frames) = (0u64, 0u64);
        for s in &shards {
            record_starts.push(records);
            frame_starts.push(frames);
            // Counts come from files or a checked manifest, whose sums were
            // checked not to overflow; saturating keeps a corrupt pair of
            // shards from wrapping around.
            records = records.saturating_add(s.info.n_records);
            frames = frames.saturating_add(s.info.n_frames);
        }
        record_starts.push(records);
        frame_starts.push(frames);
        Set {
            shards,
            record_starts,
            frame_starts,
            digest,
            options,
            manifest,
        }
    }

    // -- what the set is ------------------------------------------------------

    /// Number of shards.
    pub fn n_shards(&self) -> usize {
        self.shards.len()
    }

    /// Records of every shard together.
    pub fn n_records(&self) -> u64 {
        *self.record_starts.last().unwrap_or(&0)
    }

    /// Frames of every shard together.
    pub fn n_frames(&self) -> u64 {
        *self.frame_starts.last().unwrap_or(&0)
    }

    /// Shard `s` as the set knows it.
    pub fn shard_info(&self, s: usize) -> Option<&ShardInfo> {
        self.shards.get(s).map(|shard| &shard.info)
    }

    /// Every shard, in order.
    pub fn shard_infos(&self) -> impl Iterator<Item = &ShardInfo> {
        self.shards.iter().map(|s| &s.info)
    }

    /// The set's number of shard `s`'s first record (`n_records()` past
    /// the last shard).
    pub fn record_start(&self, s: usize) -> u64 {
        self.record_starts[s.min(self.shards.len())]
    }

    /// The set's ordinal of shard `s`'s first frame.
    pub fn frame_start(&self, s: usize) -> u64 {
        self.frame_starts[s.min(self.shards.len())]
    }

    /// The shard holding record `r` and the record's number there.
    pub fn locate_record(&self, r: u64) -> Option<(usize, u64)> {
        locate(&self.record_starts, r)
    }

    /// The shard holding frame `j` and the frame's ordinal there.
    pub fn locate_frame(&self, j: u64) -> Option<(usize, u64)> {
        locate(&self.frame_starts, j)
    }

    /// SHA-256 (hex) of the declaration the shards share.
    pub fn declaration_sha256(&self) -> &str {
        &self.digest
    }

    /// The manifest the set was opened from, if any.
    pub fn manifest_path(&self) -> Option<&Path> {
        self.manifest.as_deref()
    }

    /// The options it opens shards with.
    pub fn options(&self) -> SetOptions {
        self.options
    }

    /// Whether shard `s` is open in this process.
    pub fn is_open(&self, s: usize) -> bool {
        self.shards.get(s).is_some_and(|x| x.reader.get().is_some())
    }

    /// Shard `s`'s reader, opened (and checked against what the set knows
    /// of it) on first use.
    pub fn shard(&self, s: usize) -> Result<&Reader> {
        let shard = self.shards.get(s).ok_or_else(|| {
            Error::set(
                SetProblem::Missing,
                "",
                format!("no shard {s}: the set has {}", self.shards.len()),
            )
        })?;
        if let Some(reader) = shard.reader.get() {
            return Ok(reader);
        }
        let (reader, declaration) = self.open_described(shard)?;
        // Another thread may have opened it meanwhile: then ours is
        // dropped (the environment is shared, nothing is lost).
        let _ = shard.declaration.set(declaration);
        let _ = shard.reader.set(reader);
        Ok(shard.reader.get().expect("set above"))
    }

    fn open_described(&self, shard: &Shard) -> Result<(Reader, Declaration)> {
        let info = &shard.info;
        check_size(info)?;
        let reader = open_reader(&info.path, self.options)?;
        let name = shard_name(&info.path);
        let changed = |what: String| {
            Error::set(
                SetProblem::Changed,
                name.clone(),
                format!("{what}: the file changed since the set was described"),
            )
        };
        if reader.n_records() != info.n_records {
            return Err(changed(format!(
                "it has {} records, the set's description {}",
                reader.n_records(),
                info.n_records
            )));
        }
        if reader.n_frames() != info.n_frames {
            return Err(changed(format!(
                "it has {} frames, the set's description {}",
                reader.n_frames(),
                info.n_frames
            )));
        }
        let declaration = Declaration::of(&reader).map_err(|e| e.in_shard(&info.path))?;
        if declaration.sha256 != self.digest {
            // Another open shard, whose declaration is the set's, says what differs.
            let other = self
                .shards
                .iter()
                .find_map(|s| s.declaration.get().map(|d| (shard_name(&s.info.path), d)));
            let what = match other {
                Some((other, d)) => match first_difference(&declaration.value, &d.value) {
                    Some(diff) => format!("; against {other}: {diff}"),
                    None => String::new(),
                },
                None => String::new(),
            };
            return Err(changed(format!(
                "its declaration's sha256 is {}, the set's {}{what}",
                declaration.sha256, self.digest
            )));
        }
        Ok((reader, declaration))
    }

    /// An open shard's reader (the first open one), else shard 0 opened:
    /// for what every shard has alike (the schema, the force field).
    fn any_reader(&self) -> Result<&Reader> {
        match self.shards.iter().find_map(|s| s.reader.get()) {
            Some(reader) => Ok(reader),
            None => self.shard(0),
        }
    }

    /// The set's collection document: its first shard's (the `units` are
    /// every shard's; provenance such as an import's `source` is the first
    /// shard's own).
    pub fn collection_meta(&self) -> Result<&Document> {
        Ok(self.shard(0)?.collection_meta())
    }

    /// The trajectory declaration every shard has.
    pub fn schema(&self) -> Result<&SequenceSchema> {
        Ok(self.any_reader()?.schema())
    }

    /// The force field every shard has, if any.
    pub fn forcefield(&self) -> Result<Option<ForceField>> {
        self.any_reader()?.forcefield()
    }

    /// Whether every open shard was opened without LMDB's lock file.
    pub fn is_lock_free(&self) -> bool {
        let mut open = self.shards.iter().filter_map(|s| s.reader.get()).peekable();
        open.peek().is_some() && open.all(Reader::is_lock_free)
    }

    /// Gives back the mapped pages of every open shard
    /// ([`Reader::release_mapped_pages`]).
    pub fn release_mapped_pages(&self) {
        for reader in self.shards.iter().filter_map(|s| s.reader.get()) {
            reader.release_mapped_pages();
        }
    }

    // -- reading --------------------------------------------------------------

    /// A read transaction over the set: each shard's opens when a record
    /// of it is first read.
    pub fn txn(&self) -> SetTxn<'_> {
        SetTxn {
            set: self,
            txns: RefCell::default(),
        }
    }

    /// Record `r` of the set, read whole and checked
    /// ([`RecordTxn::record_arrays`]).
    pub fn record_arrays(&self, r: u64) -> Result<RecordArrays> {
        self.txn().record_arrays(r)
    }

    /// Record `r` of the set in the model's form.
    pub fn record(&self, r: u64) -> Result<Record> {
        self.txn().record(r)
    }

    /// Frames `js` by their ordinals in the set, in order, each handed to
    /// `visit` ([`Reader::frames`], a run of consecutive ordinals of one
    /// shard at a time).
    pub fn frames<F>(&self, js: &[u64], mut visit: F) -> Result<()>
    where
        F: FnMut(&SetFrame<'_, '_>) -> Result<()>,
    {
        let mut i = 0;
        let mut local = Vec::new();
        while i < js.len() {
            let (s, _) = self.locate_frame(js[i]).ok_or_else(|| {
                Error::refused(
                    Clause::IndexCount,
                    format!("frames[{}]", js[i]),
                    format!("no frame {}: the set has {}", js[i], self.n_frames()),
                )
            })?;
            let (lo, hi) = (self.frame_starts[s], self.frame_starts[s + 1]);
            let start = i;
            local.clear();
            while i < js.len() && (lo..hi).contains(&js[i]) {
                local.push(js[i] - lo);
                i += 1;
            }
            let reader = self.shard(s)?;
            let first_record = self.record_starts[s];
            let mut k = start;
            reader
                .frames(&local, |frame| {
                    let at = SetFrame {
                        shard: s,
                        record: first_record + frame.record,
                        ordinal: js[k],
                        frame,
                    };
                    k += 1;
                    visit(&at)
                })
                .map_err(|e| e.in_shard(&self.shards[s].info.path))?;
            self.trim_record_caches(s);
        }
        Ok(())
    }

    /// Keeps the record caches of the open shards under
    /// [`Set::RECORD_CACHE_BUDGET`] together: past it, every shard's but
    /// `keep`'s is emptied (each reader bounds its own; a shuffled reader
    /// of many shards would otherwise hold one full cache per shard).
    fn trim_record_caches(&self, keep: usize) {
        let open = || {
            self.shards
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.reader.get().map(|r| (i, r)))
        };
        let total: usize = open().map(|(_, r)| r.record_cache_bytes()).sum();
        if total > Set::RECORD_CACHE_BUDGET {
            for (i, reader) in open() {
                if i != keep {
                    reader.forget_record_entries();
                }
            }
        }
    }

    /// The budget of the shards' record caches together: 64 MiB.
    pub const RECORD_CACHE_BUDGET: usize = 64 << 20;

    /// `n_frames` of the binding's index for every record of the set
    /// (opens every shard).
    pub fn frame_counts(&self) -> Result<Vec<u64>> {
        self.per_record(|r| {
            (0..r.n_records())
                .map(|i| r.record_frames(i).unwrap_or(0))
                .collect()
        })
    }

    /// `n_atoms` of the binding's index for every record (opens every shard).
    pub fn atom_counts(&self) -> Result<Vec<u64>> {
        self.per_record(|r| r.atom_counts().to_vec())
    }

    /// `has_trajectory` of the binding's index for every record (opens
    /// every shard).
    pub fn trajectory_flags(&self) -> Result<Vec<bool>> {
        self.per_record(|r| r.trajectory_flags().to_vec())
    }

    fn per_record<T>(&self, of: impl Fn(&Reader) -> Vec<T>) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(self.n_records() as usize);
        for s in 0..self.shards.len() {
            out.extend(of(self.shard(s)?));
        }
        Ok(out)
    }

    /// The own index columns of the set: each shard's, one after the
    /// other (opens every shard). The shards must have the same columns
    /// (names, dtypes, shapes after the first axis, precisions).
    pub fn index_columns(&self) -> Result<BTreeMap<String, Column>> {
        let mut out: BTreeMap<String, Column> = BTreeMap::new();
        for s in 0..self.shards.len() {
            let path = &self.shards[s].info.path;
            let columns = self
                .shard(s)?
                .index_columns()
                .map_err(|e| e.in_shard(path))?;
            if s == 0 {
                out = columns;
                continue;
            }
            let index_error =
                |detail: String| Error::set(SetProblem::Index, shard_name(path), detail);
            let first = shard_name(&self.shards[0].info.path);
            let names = |m: &BTreeMap<String, Column>| m.keys().cloned().collect::<Vec<_>>();
            if names(&columns) != names(&out) {
                return Err(index_error(format!(
                    "its own index columns are {:?}, {first}'s {:?}",
                    names(&columns),
                    names(&out)
                )));
            }
            for (name, column) in columns {
                let acc = out.get_mut(&name).expect("same names");
                append_column(acc, column).map_err(|what| {
                    index_error(format!("own index column `{name}`: {what} ({first}'s)"))
                })?;
            }
        }
        Ok(out)
    }

    /// The whole set as one collection: the first shard's document, the
    /// shared declaration, every record in order.
    pub fn read_collection(&self) -> Result<Collection> {
        let header = Header {
            meta: self.collection_meta()?.clone(),
            sequence_schema: Some(self.schema()?.clone()),
            forcefield: self.forcefield()?,
        };
        let index = self.index_columns()?;
        let txn = self.txn();
        let mut records = Vec::with_capacity(self.n_records() as usize);
        for r in 0..self.n_records() {
            records.push(txn.record(r)?);
        }
        Ok(Collection {
            header,
            index,
            records,
        })
    }

    /// The manifest of this set, its shards named in `dir` (each must be
    /// there), without their content digests ([`Manifest::fill_digests`]
    /// computes them).
    pub fn manifest(&self, dir: &Path) -> Result<Manifest> {
        let dir_canonical = std::fs::canonicalize(dir).map_err(|e| Error::io_at(dir, e))?;
        let mut shards = Vec::with_capacity(self.shards.len());
        for s in &self.shards {
            let info = &s.info;
            let parent = info
                .path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let in_dir = std::fs::canonicalize(parent).is_ok_and(|p| p == dir_canonical);
            let name = shard_name(&info.path);
            if !in_dir || !manifest::plain_file_name(&name) {
                return Err(Error::set(
                    SetProblem::Manifest,
                    name,
                    format!("not in {}, where the manifest goes", dir.display()),
                ));
            }
            shards.push(ManifestShard {
                file: name,
                n_records: info.n_records,
                n_frames: info.n_frames,
                bytes: info.bytes,
                digest: None,
            });
        }
        Ok(Manifest {
            declaration_sha256: self.digest.clone(),
            shards,
        })
    }
}

/// `(index, offset)` of `n` in the ranges `starts` delimits (the last
/// range starting at or before `n`: empty ranges share their start with
/// the next one).
fn locate(starts: &[u64], n: u64) -> Option<(usize, u64)> {
    if n >= *starts.last()? {
        return None;
    }
    let s = starts.partition_point(|&x| x <= n).checked_sub(1)?;
    Some((s, n - starts[s]))
}

fn open_reader(path: &Path, options: SetOptions) -> Result<Reader> {
    let opened = if options.checked {
        Reader::open_checked(path)
    } else {
        Reader::open(path)
    };
    opened.map_err(|e| e.in_shard(path))
}

/// The shard is there, with the size the set was told.
fn check_size(info: &ShardInfo) -> Result<()> {
    let name = shard_name(&info.path);
    match std::fs::metadata(&info.path) {
        Ok(m) if m.len() == info.bytes => Ok(()),
        Ok(m) => Err(Error::set(
            SetProblem::Changed,
            name,
            format!(
                "its size is {} bytes, the set's description {}: the file changed since",
                m.len(),
                info.bytes
            ),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::set(
            SetProblem::Missing,
            name,
            format!("{} is not there", info.path.display()),
        )),
        Err(e) => Err(Error::io_at(&info.path, e)),
    }
}

/// Appends `more`'s rows to `acc`: the same dtype, trailing shape and
/// precision, or what differs.
fn append_column(acc: &mut Column, more: Column) -> std::result::Result<(), String> {
    if acc.dtype() != more.dtype() || acc.shape.get(1..) != more.shape.get(1..) {
        return Err(format!(
            "{} {:?} here, {} {:?} in the first shard",
            more.dtype(),
            more.shape.get(1..).unwrap_or(&[]),
            acc.dtype(),
            acc.shape.get(1..).unwrap_or(&[])
        ));
    }
    if acc.precision.map(f64::to_bits) != more.precision.map(f64::to_bits) {
        return Err(format!(
            "precision {:?} here, {:?} in the first shard",
            more.precision, acc.precision
        ));
    }
    let (rows, more_rows) = (acc.rows() as usize, more.rows() as usize);
    match (&mut acc.validity, more.validity) {
        (None, None) => {}
        (Some(v), None) => v.resize(v.len() + more_rows, true),
        (v @ None, Some(m)) => {
            let mut all = vec![true; rows];
            all.extend(m);
            *v = Some(all);
        }
        (Some(v), Some(m)) => v.extend(m),
    }
    macro_rules! cat {
        ($($variant:ident),*) => {
            match (&mut acc.data, more.data) {
                $((ColumnData::$variant(a), ColumnData::$variant(b)) => a.extend(b),)*
                _ => unreachable!("dtypes compared above"),
            }
        };
    }
    cat!(F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool, String, C64, C128);
    if let Some(first) = acc.shape.first_mut() {
        *first += more_rows as u64;
    }
    Ok(())
}

/// A read transaction over a set ([`Set::txn`]): one of each shard's,
/// opened when a record of the shard is first read, kept while this lives.
pub struct SetTxn<'s> {
    set: &'s Set,
    txns: RefCell<HashMap<usize, Rc<RecordTxn<'s>>>>,
}

impl<'s> SetTxn<'s> {
    /// The transaction of shard `s`, and the shard's path.
    fn shard_txn(&self, s: usize) -> Result<Rc<RecordTxn<'s>>> {
        if let Some(txn) = self.txns.borrow().get(&s) {
            return Ok(Rc::clone(txn));
        }
        let set: &'s Set = self.set;
        let path = &set.shards[s].info.path;
        let txn = Rc::new(set.shard(s)?.txn().map_err(|e| e.in_shard(path))?);
        self.txns.borrow_mut().insert(s, Rc::clone(&txn));
        Ok(txn)
    }

    /// The shard and local number of record `r`, or its refusal.
    fn locate(&self, r: u64) -> Result<(usize, u64)> {
        self.set.locate_record(r).ok_or_else(|| {
            Error::refused(
                Clause::IndexCount,
                format!("records[{r}]"),
                format!("no record {r}: the set has {}", self.set.n_records()),
            )
        })
    }

    /// Runs `f` on record `r`'s shard transaction with its local number,
    /// naming the shard in an error.
    pub fn with_record<T>(
        &self,
        r: u64,
        f: impl FnOnce(&RecordTxn<'s>, u64) -> Result<T>,
    ) -> Result<T> {
        let (s, local) = self.locate(r)?;
        let txn = self.shard_txn(s)?;
        f(&txn, local).map_err(|e| e.in_shard(&self.set.shards[s].info.path))
    }

    /// Record `r`, read whole ([`RecordTxn::record_arrays`]).
    pub fn record_arrays(&self, r: u64) -> Result<RecordArrays> {
        self.with_record(r, |txn, local| txn.record_arrays(local))
    }

    /// Record `r` in the model's form.
    pub fn record(&self, r: u64) -> Result<Record> {
        self.with_record(r, |txn, local| txn.record(local))
    }

    /// Record `r`'s meta document.
    pub fn record_meta(&self, r: u64) -> Result<Document> {
        self.with_record(r, |txn, local| txn.record_meta(local))
    }

    /// Record `r`'s system, if it has one.
    pub fn system(&self, r: u64) -> Result<Option<Frame>> {
        self.with_record(r, |txn, local| txn.system(local))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_skips_empty_ranges() {
        let starts = [0, 5, 5, 8];
        assert_eq!(locate(&starts, 0), Some((0, 0)));
        assert_eq!(locate(&starts, 4), Some((0, 4)));
        assert_eq!(locate(&starts, 5), Some((2, 0)));
        assert_eq!(locate(&starts, 7), Some((2, 2)));
        assert_eq!(locate(&starts, 8), None);
        assert_eq!(locate(&[0], 0), None);
    }

    #[test]
    fn columns_concatenate_with_their_masks() {
        let mut a = Column::new(vec![2], ColumnData::I64(vec![1, 2]));
        let mut b = Column::new(vec![1], ColumnData::I64(vec![3]));
        b.validity = Some(vec![false]);
        append_column(&mut a, b).unwrap();
        assert_eq!(a.shape, vec![3]);
        assert_eq!(a.data, ColumnData::I64(vec![1, 2, 3]));
        assert_eq!(a.validity, Some(vec![true, true, false]));
        let c = Column::new(vec![1], ColumnData::F64(vec![1.0]));
        assert!(append_column(&mut a, c).unwrap_err().contains("f64"));
    }
}
