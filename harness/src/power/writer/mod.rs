//! Writer traces, each with a plausible bug of an independent writer: the
//! file a conforming writer wrote, edited into the file the bug would have
//! written. `apply` returns whether the bug shows in this file (a writer
//! with the bug writes exactly the conforming file where it does not: a
//! counter that skips nothing, a block that never changes by sign only).

use serde_json::Value;

mod edits;
mod records;
mod values;

use super::image::{EnvLayout, Image};
use super::{shapes, Trace};
use crate::inspect::Key;
use edits::*;
use records::*;
use values::*;

/// A writer's bug and the trace it leaves.
pub struct WriterBug {
    /// Stable id (`trace/bug`).
    pub id: &'static str,
    /// The family of traces it belongs to.
    pub trace: Trace,
    /// The clauses whose sentences the bug breaks, the first the nearest.
    pub clauses: &'static [&'static str],
    /// What the buggy writer does.
    pub what: &'static str,
    /// Whether the file alone shows the bug (`harness inspect FILE`
    /// without a fixture must catch it).
    pub file_determines: bool,
    /// What the bug does to the file.
    pub effect: Effect,
}

/// How a writer bug shows.
pub enum Effect {
    /// Edits a conforming file into the buggy writer's; whether it shows.
    Edit(fn(&mut Image) -> bool),
    /// The same, for a bug that shows only for some inputs (a writer that
    /// derives a declaration it was not handed): the fixture too.
    EditGiven(fn(&mut Image, &Value) -> bool),
    /// The writer refuses a valid collection: whether this one (its file
    /// as a conforming writer writes it, and the fixture) has the shape it
    /// refuses. A write trial fails on any refusal of a valid collection.
    Refuses(fn(&Image, &Value) -> bool),
}

macro_rules! bug {
    ($id:literal, $trace:ident, [$($clause:literal),+], $file:literal, $what:literal, $effect:ident($apply:expr)) => {
        WriterBug {
            id: $id,
            trace: Trace::$trace,
            clauses: &[$($clause),+],
            what: $what,
            file_determines: $file,
            effect: Effect::$effect($apply),
        }
    };
    ($id:literal, $trace:ident, [$($clause:literal),+], $file:literal, $what:literal, $apply:expr) => {
        bug!($id, $trace, [$($clause),+], $file, $what, Edit($apply))
    };
}

/// Every writer bug the suite is measured against.
pub fn catalog() -> Vec<WriterBug> {
    vec![
        // Key table.
        bug!("keys/record-meta-by-counter", KeyTable, ["lmdb.record.meta-json"], false,
            "numbers `r` keys by a counter of the records whose meta is not empty",
            |img| renumber(img, b'r', |v| v != b"{}")),
        bug!("keys/system-by-counter", KeyTable, ["lmdb.system.key"], false,
            "numbers `s` keys by a counter of the records that have a system",
            |img| renumber(img, b's', |_| true)),
        bug!("keys/frames-per-record", KeyTable, ["lmdb.keys.u64be"], true,
            "numbers each record's frame keys from 0",
            frames_per_record),
        bug!("keys/frames-little-endian", KeyTable, ["lmdb.keys.u64be"], true,
            "writes frame ordinals little-endian in keys",
            |img| rekey_frames(img, |j| j.to_le_bytes())),
        bug!("keys/ff-named", KeyTable, ["lmdb.ff.key"], true,
            "stores the force field under `forcefield`",
            |img| { let had = img.entries.contains_key(b"ff".as_slice()); img.rename(b"ff", b"forcefield".to_vec()); had }),
        bug!("keys/empty-system", KeyTable, ["lmdb.system.key"], false,
            "writes an empty system frame for a record without one",
            empty_systems),
        bug!("keys/extra-key", KeyTable, ["lmdb.keys.scheme"], true,
            "writes a `version` key beside the scheme's",
            |img| img.entries.insert(b"version".to_vec(), b"1".to_vec()).is_none()),
        bug!("keys/frames-u32", KeyTable, ["lmdb.keys.exact-frame-keys", "lmdb.keys.u64be"], true,
            "keys frames `f` + a 4-byte big-endian ordinal",
            frames_u32),
        bug!("keys/record-meta-repr", KeyTable, ["lmdb.values.json-or-frame", "lmdb.record.meta-json"], true,
            "writes record meta as a Python dict's repr (single quotes)",
            |img| {
                let mut changed = false;
                for (k, v) in img.entries.iter_mut() {
                    if k.len() == 9 && k[0] == b'r' && v.contains(&b'"') {
                        v.iter_mut().filter(|b| **b == b'"').for_each(|b| *b = b'\'');
                        changed = true;
                    }
                }
                changed
            }),
        bug!("keys/records-reversed", KeyTable, ["collection.record.order"], false,
            "writes the records in reverse order",
            reverse_records),
        bug!("file/named-database", KeyTable, ["lmdb.file.unnamed-db"], true,
            "puts every key in a named database",
            |img| { img.layout = EnvLayout::NamedDatabase; true }),
        bug!("file/directory", KeyTable, ["lmdb.file.single", "collection.conformance.lmdb-binding"], true,
            "writes the environment as a directory (LMDB's default, `subdir=True`)",
            |img| { img.layout = EnvLayout::Directory; true }),
        // meta.
        bug!("meta/layout", Meta, ["lmdb.meta.layout"], true,
            "tags the layout `mrec_lmdb`",
            |img| edit_meta(img, |m| set(m, "/layout", Value::from("mrec_lmdb")))),
        bug!("meta/layout-version", Meta, ["lmdb.meta.layout-version"], true,
            "leaves out `layout_version`",
            |img| edit_meta(img, |m| remove(m, "", "layout_version"))),
        bug!("meta/molrec-version", Meta, ["collection.meta.molrec-version-stamped"], false,
            "does not stamp `molrec_version`",
            |img| edit_meta(img, |m| remove(m, "/collection", "molrec_version"))),
        bug!("meta/collection-keys-dropped", Meta, ["collection.meta.preserved", "collection.conformance.round-trip"], false,
            "keeps only `units` of the collection document",
            |img| edit_meta(img, |m| {
                let Some(c) = m.pointer_mut("/collection").and_then(Value::as_object_mut) else { return false };
                let before = c.len();
                c.retain(|k, _| k == "units" || k == "molrec_version");
                c.len() != before
            })),
        bug!("meta/n-frames-without-last", Meta, ["lmdb.index.total", "lmdb.meta.counts"], true,
            "counts `n_frames` without the last record's frames",
            |img| {
                let last = img.spans().last().map_or(0, |s| s.1);
                last > 0 && edit_meta(img, |m| {
                    let n = m["n_frames"].as_u64().unwrap_or(0);
                    set(m, "/n_frames", Value::from(n - last))
                })
            }),
        bug!("meta/n-records-with-frames", Meta, ["lmdb.index.count", "lmdb.meta.counts"], true,
            "counts in `n_records` only the records that have frames",
            |img| {
                let with = img.spans().iter().filter(|s| s.1 > 0).count();
                edit_meta(img, |m| set(m, "/n_records", Value::from(with)))
            }),
        bug!("meta/collection-nulls-dropped", Meta, ["collection.meta.preserved", "collection.conformance.round-trip"], false,
            "leaves the null-valued keys out of the collection document (`exclude_none`)",
            |img| edit_meta(img, |m| {
                let Some(c) = m.pointer_mut("/collection").and_then(Value::as_object_mut) else { return false };
                let before = c.len();
                c.retain(|_, v| !v.is_null());
                c.len() != before
            })),
        bug!("meta/record-nulls-dropped", Meta, ["collection.conformance.round-trip", "lmdb.record.meta-json"], false,
            "leaves the null-valued keys out of each record's meta document (`exclude_none`)",
            record_nulls_dropped),
        bug!("meta/schema-fills", Meta, ["collection.schema.one-declaration"], false,
            "leaves per-step fills out of `sequence_schema`",
            |img| edit_schema_entries(img, "meta", |e| e.remove("fill").is_some())),
        bug!("meta/schema-nullable", Meta, ["collection.schema.one-declaration"], false,
            "leaves `nullable` out of `sequence_schema`",
            |img| edit_schema_columns(img, |c| c.remove("nullable") == Some(Value::Bool(true)))),
        bug!("meta/schema-precision", Meta, ["collection.schema.one-declaration"], false,
            "leaves trajectory precisions out of `sequence_schema`",
            |img| edit_schema_columns(img, |c| c.remove("precision").is_some())),
        bug!("meta/schema-trailing", Meta, ["collection.schema.one-declaration"], false,
            "declares every column without its trailing shape",
            |img| edit_schema_columns(img, |c| c.remove("trailing").is_some_and(|t| t != Value::Array(vec![])))),
        bug!("meta/schema-targets", Meta, ["trajectory.block.targets-declared"], false,
            "leaves row-reference targets out of `sequence_schema`",
            |img| edit_schema_entries(img, "blocks", |b| b.remove("targets").is_some_and(|t| !t.is_null()))),
        bug!("meta/schema-structural-shape", Meta, ["trajectory.block.structural-shape-fixed"], false,
            "leaves structural shapes out of `sequence_schema`",
            |img| edit_schema_entries(img, "blocks", |b| b.remove("structural_shape").is_some_and(|t| !t.is_null()))),
        bug!("meta/record-version", Meta, ["collection.record.meta-no-version"], false,
            "stamps `molrec_version` into each record's meta",
            |img| {
                for r in 0..img.spans().len() as u64 {
                    let mut meta: Value = img.get(Key::Record(r)).and_then(|v| serde_json::from_slice(v).ok()).unwrap_or_default();
                    if let Some(m) = meta.as_object_mut() { m.insert("molrec_version".into(), Value::from(1)); }
                    if meta.is_null() { meta = serde_json::json!({"molrec_version": 1}); }
                    img.entries.insert(Key::Record(r).encode(), meta.to_string().into_bytes());
                }
                !img.spans().is_empty()
            }),
        bug!("meta/schema-version", Meta, ["trajectory.schema.no-version"], false,
            "stamps `molrec_version` into `sequence_schema`",
            |img| edit_meta(img, |m| m.pointer_mut("/sequence_schema").and_then(Value::as_object_mut)
                .is_some_and(|s| s.insert("molrec_version".into(), Value::from(1)).is_none()))),
        bug!("meta/schema-omitted-when-empty", Meta, ["lmdb.meta.schema-empty"], true,
            "leaves `sequence_schema` out when nothing is declared",
            |img| edit_meta(img, |m| {
                let empty = m.get("sequence_schema") == Some(&serde_json::json!({"blocks": {}, "meta": {}}));
                empty && remove(m, "", "sequence_schema")
            })),
        bug!("meta/schema-from-first-record", Meta, ["collection.schema.derived-union"], false,
            "derives `sequence_schema` from the first record with frames only",
            EditGiven(schema_from_first_record)),
        bug!("meta/derived-block-props-dropped", Meta, ["collection.schema.derived-union", "trajectory.block.targets-declared", "trajectory.block.structural-shape-fixed"], false,
            "derives `sequence_schema` without the blocks' targets and structural shapes",
            // A given declaration is written as given: only a derived one
            // loses them.
            EditGiven(|img, fixture| fixture.get("sequence_schema").is_none()
                && edit_schema_entries(img, "blocks", |b| {
                    let targets = b.remove("targets").is_some_and(|t| !t.is_null());
                    b.remove("structural_shape").is_some_and(|t| !t.is_null()) | targets
                }))),
        bug!("meta/ff-document-keys-dropped", Meta, ["collection.forcefield.round-trip", "collection.conformance.forcefield"], false,
            "keeps only `name`, `units`, `styles` and `source` of the force-field document",
            |img| edit_ff(img, |f| {
                let Some(m) = f.header.get_mut("meta").and_then(Value::as_object_mut) else { return false };
                let before = m.len();
                m.retain(|k, _| ["name", "units", "styles", "source"].contains(&k.as_str()));
                m.len() != before
            })),
        bug!("meta/ff-tables-dropped", Meta, ["collection.forcefield.round-trip", "collection.conformance.forcefield"], false,
            "writes the force-field document without its style tables",
            |img| edit_ff(img, |f| {
                let had = f.header.get("blocks").and_then(Value::as_object).is_some_and(|b| !b.is_empty());
                f.header.insert("blocks".into(), serde_json::json!({}));
                f.buffers.clear();
                had
            })),
        bug!("meta/ff-empty-tables-dropped", Meta, ["forcefield.style-table", "collection.forcefield.round-trip"], false,
            "writes no block for a force-field style whose table has no rows",
            |img| edit_ff(img, |f| {
                let empty: Vec<String> = f.header.get("blocks").and_then(Value::as_object).into_iter().flatten()
                    .filter(|(_, b)| b.get("count") == Some(&Value::from(0)))
                    .map(|(k, _)| k.clone()).collect();
                for k in &empty { remove_block(f, k); }
                !empty.is_empty()
            })),
        // index.
        bug!("index/first-frame-inclusive", Index, ["lmdb.index.prefix-sum"], true,
            "writes an inclusive prefix sum as `first_frame`",
            |img| {
                let spans = img.spans();
                let mut sum = 0;
                let inclusive: Vec<u64> = spans.iter().map(|s| { sum += s.1; sum }).collect();
                img.set_index_u64("first_frame", &inclusive)
            }),
        bug!("index/n-atoms-frame-0", Index, ["lmdb.index.n-atoms"], true,
            "takes `n_atoms` from the system's atoms, else from frame 0 only",
            |img| set_n_atoms(img, |counts| counts.first().copied().flatten().unwrap_or(0))),
        bug!("index/n-atoms-first-nonempty", Index, ["lmdb.index.n-atoms"], true,
            "takes `n_atoms` from the first update of atoms that has rows",
            |img| set_n_atoms(img, |counts| counts.iter().flatten().copied().find(|&c| c > 0).unwrap_or(0))),
        bug!("index/n-atoms-system-or-zero", Index, ["lmdb.index.n-atoms"], true,
            "takes `n_atoms` from the system's atoms, 0 when a system has none (never the trajectory's)",
            |img| {
                let Some(mut n_atoms) = img.index_u64("n_atoms") else { return false };
                for (r, n) in n_atoms.iter_mut().enumerate() {
                    if let Some(f) = img.frame(Key::System(r as u64)) {
                        *n = f.header.get("blocks").and_then(|b| b.get("atoms")).and_then(|a| a.get("count")).and_then(Value::as_u64).unwrap_or(0);
                    }
                }
                img.set_index_u64("n_atoms", &n_atoms)
            }),
        bug!("index/n-atoms-last", Index, ["lmdb.index.n-atoms"], true,
            "takes `n_atoms` from the last update of atoms",
            |img| set_n_atoms(img, |counts| counts.iter().flatten().copied().last().unwrap_or(0))),
        bug!("index/has-trajectory-from-frames", Index, ["lmdb.index.has-trajectory"], false,
            "sets `has_trajectory` only for records with frames",
            |img| {
                let flags: Vec<u8> = img.spans().iter().map(|s| u8::from(s.1 > 0)).collect();
                edit_index(img, |f| replace(f, "has_trajectory", false, flags))
            }),
        bug!("index/has-trajectory-u8", Index, ["lmdb.index.columns"], true,
            "stores `has_trajectory` as u8",
            |img| edit_index(img, |f| set_column_key(f, "records", "has_trajectory", "dtype", Value::from("u8")))),
        bug!("index/block-named", Index, ["lmdb.index.columns"], true,
            "names the index block `index`",
            |img| edit_index(img, |f| {
                let Some(b) = f.header.get_mut("blocks").and_then(Value::as_object_mut) else { return false };
                let Some(r) = b.remove("records") else { return false };
                b.insert("index".into(), r);
                f.buffers = std::mem::take(&mut f.buffers).into_iter()
                    .map(|((blk, c, m), v)| ((if blk == "records" { "index".into() } else { blk }, c, m), v)).collect();
                true
            })),
        bug!("index/own-columns-dropped", Index, ["collection.index.as-written", "collection.conformance.round-trip"], false,
            "writes no own index columns",
            |img| edit_index(img, |f| {
                let own: Vec<String> = columns_of(f, "records").into_iter().filter(|c| !BINDING.contains(&c.as_str())).collect();
                for c in &own { drop_column(f, "records", c); }
                !own.is_empty()
            })),
        bug!("index/own-precision-dropped", Index, ["column.precision.placement"], false,
            "leaves an own index column's precision out of its header",
            |img| edit_index(img, |f| drop_column_keys(f, "precision"))),
        bug!("index/own-masks-dropped", Index, ["mrf1.validity", "collection.index.as-written"], false,
            "writes the own index columns without their validity masks",
            |img| edit_index(img, own_index_masks_dropped)),
        // Frame headers and bytes.
        bug!("header/step-as-string", Header, ["typed-json.forms", "mrf1.step-time-typed"], true,
            "writes every step as a decimal string",
            |img| img.edit_headers(b'f', |h| h.get_mut("step").is_some_and(int_to_string))),
        bug!("header/per-step-int-as-string", Header, ["typed-json.forms", "mrf1.meta-typed"], true,
            "writes integer per-step values as decimal strings",
            |img| {
                let tags = per_step_tags(img);
                img.edit_headers(b'f', |h| each_meta(h, |k, v| tags.get(k).is_some_and(|t| is_int_tag(t)) && int_to_string(v)))
            }),
        bug!("header/system-meta-int-as-string", Header, ["typed-json.forms"], true,
            "writes integer system meta values as decimal strings",
            |img| img.edit_headers(b's', |h| {
                let tags = h.get("meta_types").cloned().unwrap_or_default();
                each_meta(h, |k, v| tags.get(k).and_then(Value::as_str).is_some_and(is_int_tag) && int_to_string(v))
            })),
        bug!("header/fill-int-as-string", Header, ["typed-json.forms"], true,
            "writes integer fills as decimal strings",
            |img| edit_schema_entries(img, "meta", |e| {
                let int = e.get("dtype").and_then(Value::as_str).is_some_and(is_int_tag);
                int && e.get_mut("fill").is_some_and(int_to_string)
            })),
        bug!("header/big-int-as-float", Header, ["typed-json.forms"], true,
            "writes integers beyond 2^53 as JSON reals",
            |img| edit_typed_integers(img, big_to_float)),
        bug!("header/non-finite-as-null", Header, ["typed-json.forms"], true,
            "writes a non-finite f64 value (per-step or system meta) as null",
            |img| {
                let a = img.edit_headers(b'f', |h| each_meta(h, |_, v| non_finite_to_null(v)));
                let b = img.edit_headers(b's', |h| each_meta(h, |_, v| non_finite_to_null(v)));
                a | b
            }),
        bug!("header/length-in-chars", Header, ["mrf1.header-length"], true,
            "counts the header length in characters, not bytes",
            header_length_in_chars),
        bug!("header/no-padding", Header, ["mrf1.padding"], true,
            "starts the payload right after the header, unpadded",
            |img| relayout(img, 8, false)),
        bug!("header/packed-buffers", Header, ["mrf1.offset-aligned"], true,
            "packs buffers without aligning each to 8",
            |img| relayout(img, 1, true)),
        bug!("header/big-endian", Header, ["mrf1.buffer-layout", "mrf1.layout"], false,
            "writes numeric buffers big-endian",
            |img| edit_buffers(img, |dtype, _, bytes| { reverse_elements(dtype, bytes); true })),
        bug!("header/string-column-major", Header, ["mrf1.string-values"], false,
            "lists a multi-dimensional string column's values column-major",
            |img| edit_frames(img, string_column_major)),
        bug!("header/complex-swapped", Header, ["mrf1.complex-interleaved"], false,
            "writes complex values as [im, re]",
            |img| edit_buffers(img, |dtype, _, bytes| swap_complex(dtype, bytes))),
        bug!("header/bool-ff", Header, ["mrf1.bool-byte"], true,
            "stores true as the byte 0xFF",
            |img| edit_buffers(img, |dtype, mask, bytes| !mask && dtype == "bool" && ones_to(bytes, 0xFF))),
        bug!("header/system-attributes-dropped", Header, ["mrf1.attributes"], false,
            "leaves a system block's attributes out",
            |img| edit_block_entries(img, b's', |b| b.remove("attributes").is_some())),
        bug!("header/system-targets-dropped", Header, ["mrf1.targets"], false,
            "leaves a system block's row-reference targets out",
            |img| edit_block_entries(img, b's', |b| b.remove("targets").is_some_and(|t| !t.is_null()))),
        bug!("header/system-structural-shape-dropped", Header, ["block.structural-shape.product"], false,
            "leaves a system block's structural shape out",
            |img| edit_block_entries(img, b's', |b| b.remove("structural_shape").is_some_and(|t| !t.is_null()))),
        bug!("header/codec-delta", Header, ["mrf1.no-codec"], false,
            "applies a delta filter to f64 buffers",
            // Columns with a validity mask are left alone: a delta shows
            // there only under a null row, whose value means nothing.
            |img| edit_frames(img, |f| {
                let masked: Vec<(String, String)> = f.buffers.keys().filter(|k| k.2).map(|(b, c, _)| (b.clone(), c.clone())).collect();
                let plain: Vec<(String, String, bool)> = f.buffers.keys()
                    .filter(|(b, c, m)| !m && !masked.contains(&(b.clone(), c.clone())) && f.dtype(b, c).as_deref() == Some("f64"))
                    .cloned().collect();
                plain.into_iter().fold(false, |changed, k| {
                    f.buffers.get_mut(&k).is_some_and(|bytes| delta(bytes)) | changed
                })
            })),
        bug!("header/ints-widened", Header, ["column.dtype.preserved"], false,
            "stores narrower integer columns as i64 / u64",
            |img| edit_frames(img, widen_ints)),
        bug!("header/ff-meta-types", Header, ["mrf1.ff-meta"], true,
            "writes `meta_types` on the force-field frame",
            |img| edit_ff(img, |f| {
                let tags: serde_json::Map<String, Value> = f.header.get("meta").and_then(Value::as_object).into_iter().flatten()
                    .map(|(k, _)| (k.clone(), Value::from("json"))).collect();
                f.header.insert("meta_types".into(), Value::Object(tags));
                true
            })),
        bug!("header/units-per-block", Header, ["collection.meta.no-column-units"], false,
            "states the collection's units on each system block, as its attributes",
            |img| {
                let units = img.meta().pointer("/collection/units").cloned().unwrap_or_default();
                edit_block_entries(img, b's', |b| {
                    let attributes = b.entry("attributes").or_insert_with(|| serde_json::json!({}));
                    attributes.as_object_mut().is_some_and(|a| a.insert("units".into(), units.clone()).is_none())
                })
            }),
        bug!("header/f64-15-digits", Header, ["lmdb.model.same-content", "typed-json.forms"], false,
            "prints typed f64 header values (per-step values and fills, `time`, the cell, system meta) with 15 significant digits",
            f64_15_digits),
        bug!("header/zero-row-trailing-dropped", Header, ["column.shape", "collection.schema.record-subset"], true,
            "writes a zero-row column with shape `[0]`, without its trailing axes",
            |img| edit_frames(img, zero_row_shape_flat)),
        bug!("header/trailing-ones-squeezed", Header, ["column.shape", "collection.schema.record-subset"], false,
            "leaves each trailing axis of length 1 out of a column's shape (`numpy.squeeze`)",
            |img| edit_frames(img, trailing_ones_squeezed)),
        // Per-step keys and fills.
        bug!("per-step/fill-not-materialized", PerStep, ["lmdb.frame.meta-materialized"], true,
            "leaves out a per-step key whose value is its fill",
            |img| {
                let fills = per_step_fills(img);
                img.edit_headers(b'f', |h| {
                    let Some(meta) = h.get_mut("meta").and_then(Value::as_object_mut) else { return false };
                    let before = meta.len();
                    meta.retain(|k, v| fills.get(k) != Some(v));
                    meta.len() != before
                })
            }),
        bug!("per-step/shifted", PerStep, ["lmdb.frame.meta-materialized"], false,
            "writes each update's per-step values one ordinal late",
            shifted_meta),
        bug!("per-step/json-as-text", PerStep, ["typed-json.forms"], false,
            "writes a json-tagged per-step value as its JSON text",
            |img| {
                let tags = per_step_tags(img);
                img.edit_headers(b'f', |h| each_meta(h, |k, v| {
                    if tags.get(k).map(String::as_str) != Some("json") { return false }
                    *v = Value::from(v.to_string());
                    true
                }))
            }),
        bug!("per-step/json-null-as-omitted", PerStep, ["lmdb.frame.meta-materialized", "trajectory.meta.fill-null-json-only"], false,
            "treats a per-step value null (a json key's document) as an omitted key: writes the key's fill there, or leaves the key out when it has none",
            |img| {
                let fills = per_step_fills(img);
                img.edit_headers(b'f', |h| {
                    let Some(meta) = h.get_mut("meta").and_then(Value::as_object_mut) else { return false };
                    let nulls: Vec<String> = meta.iter()
                        .filter(|(k, v)| v.is_null() && fills.get(*k) != Some(&Value::Null))
                        .map(|(k, _)| k.clone()).collect();
                    for k in &nulls {
                        match fills.get(k) {
                            Some(fill) => { meta.insert(k.clone(), fill.clone()); }
                            None => { meta.remove(k); }
                        }
                    }
                    !nulls.is_empty()
                })
            }),
        // step, time, box placement.
        bug!("placement/time-first-only", Placement, ["trajectory.time.all-or-none"], true,
            "writes `time` on a record's first update only",
            |img| per_record(img, |_, ups| ups.iter_mut().skip(1).fold(false, |c, h| h.remove("time").is_some() | c))),
        bug!("placement/time-when-none", Placement, ["lmdb.frame.time"], false,
            "writes `time: 0.0` on updates of a trajectory without times",
            |img| img.edit_headers(b'f', |h| !h.contains_key("time") && h.insert("time".into(), Value::from(0.0)).is_none())),
        bug!("placement/time-from-first-trajectory", Placement, ["lmdb.frame.time"], false,
            "writes `time` only when the collection's first trajectory with frames has times",
            time_from_first_trajectory),
        bug!("placement/step-is-ordinal", Placement, ["lmdb.frame.step"], false,
            "writes the record-local ordinal as the step",
            |img| per_record(img, |_, ups| ups.iter_mut().enumerate().fold(false, |c, (k, h)| {
                let changed = h.get("step") != Some(&Value::from(k));
                h.insert("step".into(), Value::from(k));
                changed | c
            }))),
        bug!("placement/step-time-on-system", Placement, ["mrf1.step-time-placement"], true,
            "writes `step` on system frames",
            |img| img.edit_headers(b's', |h| h.insert("step".into(), Value::from(0)).is_none())),
        bug!("placement/box-restated", Placement, ["lmdb.frame.box-on-change"], true,
            "writes the cell in effect on every update",
            |img| per_record(img, |_, ups| {
                let mut cell: Option<Value> = None;
                let mut changed = false;
                for h in ups.iter_mut() {
                    match h.get("box").filter(|b| !b.is_null()) {
                        Some(b) => cell = Some(b.clone()),
                        None => if let Some(c) = &cell { h.insert("box".into(), c.clone()); changed = true; },
                    }
                }
                changed
            })),
        bug!("placement/box-across-records", Placement, ["lmdb.frame.box-on-change"], false,
            "carries the cell across records: a record's first update leaves out a cell equal to the previous record's",
            box_across_records),
        bug!("placement/box-boundary-change-missed", Placement, ["lmdb.frame.box-on-change", "box.trajectory-carry"], false,
            "does not write a cell whose boundary alone changed",
            boundary_change_missed),
        bug!("placement/blocks-across-records", Placement, ["lmdb.frame.no-cross-record", "lmdb.frame.first-restates", "lmdb.model.same-content"], false,
            "carries blocks across records: a record's first update leaves out a block equal to the previous record's",
            blocks_across_records),
        bug!("placement/change-by-value", Placement, ["trajectory.block.change-bitwise", "lmdb.frame.logical-content", "lmdb.model.same-content"], false,
            "compares a block with its previous update by value (-0.0 == 0.0), not bitwise",
            |img| unchanged_dropped(img, Compare::ByValue)),
        bug!("placement/change-ignores-strings", Placement, ["trajectory.block.change-bitwise", "lmdb.model.same-content"], false,
            "compares a block with its previous update by its buffers only: a change of a string column alone is not written",
            |img| unchanged_dropped(img, Compare::WithoutStrings)),
        bug!("placement/box-change-by-value", Placement, ["lmdb.frame.box-on-change", "box.trajectory-carry"], false,
            "compares a cell with the one in effect by value (-0.0 == 0.0): a cell whose only change is the sign of a zero is not written",
            box_change_by_value),
        bug!("placement/box-restated-as-presented", Placement, ["lmdb.frame.box-on-change"], false,
            "compares a presented cell with the previous presentation as given, not as stored: one cell spelled two ways is written twice",
            EditGiven(box_restated_as_presented)),
        bug!("placement/mask-change-ignored", Placement, ["trajectory.block.change-bitwise"], false,
            "compares a block with its previous update without its masks",
            |img| unchanged_dropped(img, Compare::WithoutMasks)),
        bug!("placement/zero-row-skipped", Placement, ["lmdb.frame.zero-row-empties"], false,
            "writes no update for a block presented with zero rows",
            |img| per_record(img, |_, ups| ups.iter_mut().fold(false, |c, h| {
                let Some(b) = h.get_mut("blocks").and_then(Value::as_object_mut) else { return c };
                let before = b.len();
                b.retain(|_, e| e.get("count") != Some(&Value::from(0)));
                (b.len() != before) | c
            }))),
        bug!("placement/reappear-after-empty", Placement, ["lmdb.frame.zero-row-empties", "trajectory.block.states", "lmdb.model.same-content"], false,
            "does not remember a zero-row update: a block presented again with its rows from before it was emptied is not written",
            EditGiven(reappear_after_empty)),
        bug!("placement/omission-as-zero-row", Placement, ["trajectory.block.states"], false,
            "writes a zero-row update at a record's first frame for each declared block it does not present",
            omission_as_zero_row),
        bug!("placement/undefined-cell-vectors", Placement, ["box.undefined-cell"], true,
            "stores an undefined cell's vectors as given (not the identity)",
            |img| edit_undefined_cells(img, |c| { c.insert("vectors".into(), serde_json::json!([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])); true })),
        bug!("placement/undefined-cell-boundary", Placement, ["box.undefined-cell"], true,
            "leaves an undefined cell's all-false boundary out",
            |img| edit_undefined_cells(img, |c| c.remove("boundary").is_some())),
        bug!("placement/cell-defined-omitted", Placement, ["box.defaults"], false,
            "leaves `cell_defined: false` out of an undefined cell",
            |img| edit_undefined_cells(img, |c| c.remove("cell_defined").is_some())),
        bug!("placement/undefined-origin-zeroed", Placement, ["box.undefined-origin"], false,
            "stores an undefined cell's origin as zero",
            |img| edit_undefined_cells(img, |c| {
                let moved = c.get("origin").and_then(Value::as_array).is_some_and(|o| o.iter().any(|x| x.as_f64() != Some(0.0)));
                c.insert("origin".into(), serde_json::json!([0.0, 0.0, 0.0]));
                moved
            })),
        bug!("placement/box-named-cell", Placement, ["mrf1.box-placement"], false,
            "writes the cell under the header key `cell`",
            |img| img.edit_headers(b'f', |h| match h.remove("box") {
                Some(b) if !b.is_null() => { h.insert("cell".into(), b); true }
                Some(b) => { h.insert("box".into(), b); false }
                None => false,
            })),
        bug!("placement/topology-once", Placement, ["collection.topology.changing-in-trajectory", "collection.conformance.topology", "lmdb.model.same-content"], false,
            "writes each block but `atoms` only at its first update in a record, as if topology never changed",
            topology_once),
        bug!("placement/aligned-not-restated", Placement, ["trajectory.aligned.restate-on-growth", "collection.conformance.aligned-carry-growth"], false,
            "does not restate an aligned block where its target's row count changes",
            aligned_not_restated),
        // meta_types.
        bug!("meta-types/missing", MetaTypes, ["mrf1.meta-types"], true,
            "writes no `meta_types` on a system frame",
            |img| img.edit_headers(b's', |h| {
                let has_meta = h.get("meta").and_then(Value::as_object).is_some_and(|m| !m.is_empty());
                has_meta && h.remove("meta_types").is_some()
            })),
        bug!("meta-types/inferred", MetaTypes, ["mrf1.meta-types"], false,
            "tags system meta by inference from the values, not by the stated tags",
            |img| img.edit_headers(b's', |h| {
                let meta = h.get("meta").and_then(Value::as_object).cloned().unwrap_or_default();
                let Some(types) = h.get_mut("meta_types").and_then(Value::as_object_mut) else { return false };
                let mut changed = false;
                for (k, v) in &meta {
                    let inferred = Value::from(crate::judge::infer_tag(v));
                    if types.get(k) != Some(&inferred) { types.insert(k.clone(), inferred); changed = true; }
                }
                changed
            })),
        bug!("meta-types/numbers-as-f64", MetaTypes, ["meta.tag.inference"], false,
            "infers f64 for every untagged number (an integer's tag is i64 or u64)",
            EditGiven(numbers_as_f64)),
        bug!("meta-types/special-strings-as-f64", MetaTypes, ["meta.tag.inference", "mrf1.meta-types"], false,
            "tags an untagged system meta string `NaN`, `Infinity` or `-Infinity` f64",
            EditGiven(special_strings_as_f64)),
        bug!("meta-types/real-lists-as-vectors", MetaTypes, ["meta.tag.inference", "mrf1.meta-types"], false,
            "tags an untagged system meta list of 3, 6 or 9 reals as `f64x3`, `f64x6` or `f64x9`, not `json`",
            EditGiven(real_lists_as_vectors)),
        // Precision placement.
        bug!("precision/on-updates", Precision, ["column.precision.placement"], true,
            "states the declared precision on trajectory update columns",
            precision_on_updates),
        bug!("precision/system-dropped", Precision, ["column.precision.placement"], false,
            "leaves a system column's precision out of its header",
            |img| edit_frames_with(img, b's', |f| drop_column_keys(f, "precision"))),
        bug!("precision/off-grid", Precision, ["column.precision.rounding"], false,
            "stores values a unit in the last place off the declared precision's grid",
            off_grid),
        bug!("precision/negative-zero-lost", Precision, ["column.precision.rounding"], false,
            "rounds through an integer (`llrint(x / q) * q`), storing -0.0 as 0.0",
            negative_zero_lost),
        bug!("precision/quantum-log2", Precision, ["column.precision.rounding"], false,
            "takes the quantum as `2 ** floor(log2(p))`, above p where `log2` rounds a p one ulp below a power of two up to its exponent",
            EditGiven(quantum_from_log2)),
        // Validity masks.
        bug!("mask/dropped", Mask, ["mrf1.validity"], false,
            "writes no validity mask",
            |img| edit_frames(img, |f| {
                let any_null = f.buffers.iter().any(|(k, v)| k.2 && v.contains(&0));
                f.buffers.retain(|k, _| !k.2);
                drop_column_keys(f, "validity") && any_null
            })),
        bug!("mask/true-as-ff", Mask, ["mrf1.validity"], true,
            "writes a valid row's mask byte as 0xFF",
            |img| edit_buffers(img, |_, mask, bytes| mask && ones_to(bytes, 0xFF))),
        bug!("mask/null-values-zeroed", Mask, ["column.validity.null-value"], false,
            "stores zero under each null row (a masked array's `.filled(0)`), not the value it was handed",
            null_row_values_zeroed),
        bug!("mask/inverted", Mask, ["mrf1.validity"], false,
            "writes 1 for a null row and 0 for a valid one",
            |img| edit_buffers(img, |_, mask, bytes| { if mask { bytes.iter_mut().for_each(|b| *b ^= 1); } mask })),
        // Valid input refused.
        bug!("refuses/unlinked-type", Accepts, ["collection.forcefield.links"], false,
            "refuses a record whose atoms or relation `type` names no force-field row",
            Refuses(|img, _| shapes::unlinked_type(img))),
        bug!("refuses/zero-frame-trajectory", Accepts, ["collection.record.zero-frame", "collection.conformance.subsets-zero-frames"], false,
            "refuses a record whose trajectory has zero frames",
            Refuses(|img, _| shapes::zero_frame_trajectory(img))),
        bug!("refuses/block-subset", Accepts, ["collection.schema.record-subset", "collection.conformance.subsets-zero-frames"], false,
            "refuses a record that presents only some of the declared blocks",
            Refuses(|img, _| shapes::block_subset(img))),
        bug!("refuses/missing-part", Accepts, ["collection.conformance.missing-part"], false,
            "refuses a record without a system or without a trajectory",
            Refuses(|img, _| shapes::missing_part(img))),
        bug!("refuses/null-row-reference", Accepts, ["column.validity.null-value"], false,
            "range-checks the value under a null row reference",
            Refuses(|img, _| shapes::null_reference_out_of_range(img))),
    ]
}
