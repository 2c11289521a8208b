//! Writer traces, each with a plausible bug of an independent writer: the
//! file a conforming writer wrote, edited into the file the bug would have
//! written. `apply` returns whether the bug shows in this file (a writer
//! with the bug writes exactly the conforming file where it does not: a
//! counter that skips nothing, a block that never changes by sign only).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::image::{EnvLayout, Frame, Image};
use super::{shapes, Trace};
use crate::inspect::Key;

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
            |img| {
                let a = img.edit_headers(b'f', |h| {
                    let step = h.get_mut("step").is_some_and(big_to_float);
                    each_meta(h, |_, v| big_to_float(v)) | step
                });
                let b = img.edit_headers(b's', |h| each_meta(h, |_, v| big_to_float(v)));
                a | b
            }),
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
            |img| edit_buffers(img, |dtype, mask, bytes| !mask && dtype == "f64" && delta(bytes))),
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
        // step, time, box placement.
        bug!("placement/time-first-only", Placement, ["trajectory.time.all-or-none"], true,
            "writes `time` on a record's first update only",
            |img| per_record(img, |_, ups| ups.iter_mut().skip(1).fold(false, |c, h| h.remove("time").is_some() | c))),
        bug!("placement/time-when-none", Placement, ["lmdb.frame.time"], false,
            "writes `time: 0.0` on updates of a trajectory without times",
            |img| img.edit_headers(b'f', |h| !h.contains_key("time") && h.insert("time".into(), Value::from(0.0)).is_none())),
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
        bug!("placement/blocks-across-records", Placement, ["lmdb.frame.no-cross-record", "lmdb.frame.first-restates", "lmdb.model.same-content"], false,
            "carries blocks across records: a record's first update leaves out a block equal to the previous record's",
            blocks_across_records),
        bug!("placement/change-by-value", Placement, ["trajectory.block.change-bitwise", "lmdb.frame.logical-content", "lmdb.model.same-content"], false,
            "compares a block with its previous update by value (-0.0 == 0.0), not bitwise",
            |img| unchanged_dropped(img, Compare::ByValue)),
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
                    let inferred = Value::from(infer_tag(v));
                    if types.get(k) != Some(&inferred) { types.insert(k.clone(), inferred); changed = true; }
                }
                changed
            })),
        bug!("meta-types/numbers-as-f64", MetaTypes, ["meta.tag.inference"], false,
            "infers f64 for every untagged number (an integer's tag is i64 or u64)",
            EditGiven(numbers_as_f64)),
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

/// The binding's own index columns.
const BINDING: [&str; 4] = ["first_frame", "n_frames", "n_atoms", "has_trajectory"];

fn set(m: &mut Value, pointer: &str, v: Value) -> bool {
    match m.pointer_mut(pointer) {
        Some(slot) if *slot != v => {
            *slot = v;
            true
        }
        _ => false,
    }
}

fn remove(m: &mut Value, parent: &str, key: &str) -> bool {
    m.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .is_some_and(|o| o.remove(key).is_some())
}

fn edit_meta(img: &mut Image, edit: impl FnOnce(&mut Value) -> bool) -> bool {
    let mut meta = img.meta();
    let changed = edit(&mut meta);
    if changed {
        img.set_meta(&meta);
    }
    changed
}

/// Each entry of `sequence_schema.<part>` (`blocks` or `meta`).
fn edit_schema_entries(
    img: &mut Image,
    part: &str,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    edit_meta(img, |m| {
        let Some(entries) = m
            .pointer_mut(&format!("/sequence_schema/{part}"))
            .and_then(Value::as_object_mut)
        else {
            return false;
        };
        entries
            .values_mut()
            .fold(false, |c, e| e.as_object_mut().is_some_and(&mut edit) | c)
    })
}

fn edit_schema_columns(
    img: &mut Image,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    edit_schema_entries(img, "blocks", |b| {
        let Some(cols) = b.get_mut("columns").and_then(Value::as_object_mut) else {
            return false;
        };
        cols.values_mut().fold(false, |c, col| {
            col.as_object_mut().is_some_and(&mut edit) | c
        })
    })
}

/// Moves the values of `prefix` keys to consecutive numbers, in order,
/// keeping those `keep` says the writer wrote; whether one moved.
fn renumber(img: &mut Image, prefix: u8, keep: impl Fn(&[u8]) -> bool) -> bool {
    let keys: Vec<Vec<u8>> = img
        .entries
        .keys()
        .filter(|k| k.len() == 9 && k[0] == prefix)
        .cloned()
        .collect();
    let values: Vec<(Vec<u8>, Vec<u8>)> = keys
        .into_iter()
        .map(|k| {
            let v = img.entries.remove(&k).unwrap_or_default();
            (k, v)
        })
        .collect();
    let mut next = 0u64;
    let mut moved = false;
    for (k, v) in values {
        if !keep(&v) {
            continue;
        }
        let mut key = vec![prefix];
        key.extend_from_slice(&next.to_be_bytes());
        moved |= key != k;
        img.entries.insert(key, v);
        next += 1;
    }
    moved
}

fn rekey_frames(img: &mut Image, encode: impl Fn(u64) -> [u8; 8]) -> bool {
    let frames: Vec<Vec<u8>> = img
        .entries
        .keys()
        .filter(|k| k.len() == 9 && k[0] == b'f')
        .cloned()
        .collect();
    let mut changed = false;
    let mut moved = BTreeMap::new();
    for k in frames {
        let j = u64::from_be_bytes(k[1..].try_into().unwrap_or_default());
        let mut key = vec![b'f'];
        key.extend_from_slice(&encode(j));
        changed |= key != k;
        if let Some(v) = img.entries.remove(&k) {
            moved.insert(key, v);
        }
    }
    img.entries.extend(moved);
    changed
}

fn frames_per_record(img: &mut Image) -> bool {
    let spans = img.spans();
    let mut moved = BTreeMap::new();
    for &(first, n) in &spans {
        for k in 0..n {
            if let Some(v) = img.entries.remove(&Key::Frame(first + k).encode()) {
                moved.insert(Key::Frame(k).encode(), v);
            }
        }
    }
    img.entries.extend(moved);
    spans.iter().any(|s| s.0 > 0 && s.1 > 0)
}

fn empty_systems(img: &mut Image) -> bool {
    let empty = Frame {
        header: serde_json::json!({"blocks": {}, "meta": {}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        buffers: BTreeMap::new(),
    };
    let mut added = false;
    for r in 0..img.spans().len() as u64 {
        if img.get(Key::System(r)).is_none() {
            img.set_frame(Key::System(r), &empty);
            added = true;
        }
    }
    added
}

/// For each record, the `atoms` row count of each of its updates (`None`
/// where an update has no `atoms`), when its system has no `atoms`.
fn set_n_atoms(img: &mut Image, rule: impl Fn(&[Option<u64>]) -> u64) -> bool {
    let Some(mut n_atoms) = img.index_u64("n_atoms") else {
        return false;
    };
    let atoms = |h: &Map<String, Value>| h.get("blocks")?.get("atoms")?.get("count")?.as_u64();
    for (r, span) in img.spans().into_iter().enumerate() {
        let system = img
            .frame(Key::System(r as u64))
            .and_then(|f| atoms(&f.header));
        if system.is_none() {
            let counts: Vec<Option<u64>> = img.updates(span).iter().map(atoms).collect();
            n_atoms[r] = rule(&counts);
        }
    }
    img.set_index_u64("n_atoms", &n_atoms)
}

fn edit_index(img: &mut Image, edit: impl FnOnce(&mut Frame) -> bool) -> bool {
    let Some(mut frame) = img.frame(Key::Index) else {
        return false;
    };
    let changed = edit(&mut frame);
    if changed {
        img.set_frame(Key::Index, &frame);
    }
    changed
}

/// Each frame of the file (systems, updates, index, force field).
fn edit_frames(img: &mut Image, mut edit: impl FnMut(&mut Frame) -> bool) -> bool {
    [b's', b'f']
        .into_iter()
        .fold(false, |c, p| edit_frames_with(img, p, &mut edit) | c)
        | edit_index(img, &mut edit)
        | match img
            .entries
            .get(b"ff".as_slice())
            .and_then(|v| Frame::parse(v))
        {
            Some(mut f) => {
                let changed = edit(&mut f);
                if changed {
                    img.entries.insert(b"ff".to_vec(), f.encode(8, true));
                }
                changed
            }
            None => false,
        }
}

fn edit_frames_with(img: &mut Image, prefix: u8, mut edit: impl FnMut(&mut Frame) -> bool) -> bool {
    let mut changed = false;
    for (k, v) in img.entries.iter_mut() {
        if k.len() != 9 || k[0] != prefix {
            continue;
        }
        if let Some(mut f) = Frame::parse(v) {
            if edit(&mut f) {
                *v = f.encode(8, true);
                changed = true;
            }
        }
    }
    changed
}

/// Each buffer of each frame: `(dtype, is a mask, bytes)`.
fn edit_buffers(img: &mut Image, mut edit: impl FnMut(&str, bool, &mut Vec<u8>) -> bool) -> bool {
    edit_frames(img, |f| {
        let dtypes: Vec<_> = f
            .buffers
            .keys()
            .map(|(b, c, m)| f.dtype(b, c).map(|d| (d, *m)))
            .collect();
        f.buffers
            .values_mut()
            .zip(dtypes)
            .fold(false, |changed, (bytes, d)| {
                let before = bytes.clone();
                let Some((dtype, mask)) = d else {
                    return changed;
                };
                edit(&dtype, mask, bytes) && *bytes != before || changed
            })
    })
}

fn edit_block_entries(
    img: &mut Image,
    prefix: u8,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    img.edit_headers(prefix, |h| {
        let Some(blocks) = h.get_mut("blocks").and_then(Value::as_object_mut) else {
            return false;
        };
        blocks
            .values_mut()
            .fold(false, |c, b| b.as_object_mut().is_some_and(&mut edit) | c)
    })
}

fn columns_of(f: &Frame, block: &str) -> Vec<String> {
    f.header
        .get("blocks")
        .and_then(|b| b.get(block))
        .and_then(|b| b.get("columns"))
        .and_then(Value::as_object)
        .map(|c| c.keys().cloned().collect())
        .unwrap_or_default()
}

fn drop_column(f: &mut Frame, block: &str, column: &str) {
    if let Some(cols) = f
        .header
        .get_mut("blocks")
        .and_then(|b| b.get_mut(block))
        .and_then(|b| b.get_mut("columns"))
        .and_then(Value::as_object_mut)
    {
        cols.remove(column);
    }
    f.buffers
        .retain(|(b, c, _), _| !(b == block && c == column));
}

fn set_column_key(f: &mut Frame, block: &str, column: &str, key: &str, v: Value) -> bool {
    let Some(entry) = f
        .header
        .get_mut("blocks")
        .and_then(|b| b.get_mut(block))
        .and_then(|b| b.get_mut("columns"))
        .and_then(|c| c.get_mut(column))
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    entry.insert(key.into(), v.clone()).as_ref() != Some(&v)
}

/// Removes `key` from every column entry of the frame; whether one had it.
fn drop_column_keys(f: &mut Frame, key: &str) -> bool {
    let mut changed = false;
    for block in f
        .header
        .get_mut("blocks")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|b| b.values_mut())
    {
        for col in block
            .get_mut("columns")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|c| c.values_mut())
        {
            changed |= col.as_object_mut().is_some_and(|c| c.remove(key).is_some());
        }
    }
    changed
}

/// Sets the buffer of a 1-byte column to `bytes`.
fn replace(f: &mut Frame, column: &str, mask: bool, bytes: Vec<u8>) -> bool {
    let slot = ("records".to_string(), column.to_string(), mask);
    let changed = f.buffers.get(&slot) != Some(&bytes);
    f.buffers.insert(slot, bytes);
    changed
}

fn is_int_tag(tag: &str) -> bool {
    matches!(
        tag,
        "i32" | "i64" | "u32" | "u64" | "i32x3" | "i64x3" | "u32x3" | "u64x3"
    )
}

/// An integer within ±2^53 (or each one of a vector) as its decimal string.
fn int_to_string(v: &mut Value) -> bool {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => {
            *v = Value::from(n.to_string());
            true
        }
        Value::Array(items) => items.iter_mut().fold(false, |c, x| int_to_string(x) | c),
        _ => false,
    }
}

/// A decimal string beyond 2^53 (or each one of a vector) as a JSON real.
fn big_to_float(v: &mut Value) -> bool {
    match v {
        Value::String(s) => match s.parse::<i128>() {
            Ok(n) => {
                *v = Value::from(n as f64);
                true
            }
            Err(_) => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |c, x| big_to_float(x) | c),
        _ => false,
    }
}

fn non_finite_to_null(v: &mut Value) -> bool {
    match v {
        Value::String(s) if ["NaN", "Infinity", "-Infinity"].contains(&s.as_str()) => {
            *v = Value::Null;
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |c, x| non_finite_to_null(x) | c),
        _ => false,
    }
}

/// Each `meta` value of a header.
fn each_meta(h: &mut Map<String, Value>, mut edit: impl FnMut(&str, &mut Value) -> bool) -> bool {
    let Some(meta) = h.get_mut("meta").and_then(Value::as_object_mut) else {
        return false;
    };
    meta.iter_mut().fold(false, |c, (k, v)| edit(k, v) | c)
}

fn per_step_tags(img: &Image) -> BTreeMap<String, String> {
    img.meta()
        .pointer("/sequence_schema/meta")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, e)| Some((k.clone(), e.get("dtype")?.as_str()?.to_string())))
        .collect()
}

fn per_step_fills(img: &Image) -> BTreeMap<String, Value> {
    img.meta()
        .pointer("/sequence_schema/meta")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, e)| Some((k.clone(), e.get("fill")?.clone())))
        .collect()
}

/// The tag a writer infers for a system meta value it was not told.
fn infer_tag(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "i64",
        Value::Number(n) if n.is_u64() => "u64",
        Value::Number(_) => "f64",
        Value::String(_) => "string",
        _ => "json",
    }
}

fn header_length_in_chars(img: &mut Image) -> bool {
    let mut changed = false;
    for v in img.entries.values_mut() {
        let Ok(view) = crate::inspect::frame_bytes::parse(v) else {
            continue;
        };
        let text = &v[8..8 + view.header_len];
        let chars = String::from_utf8_lossy(text).chars().count();
        if chars != view.header_len {
            v[4..8].copy_from_slice(&(chars as u32).to_le_bytes());
            changed = true;
        }
    }
    changed
}

/// Every frame laid out again with buffers aligned to `align` and the
/// payload padded to 8 or not; whether any value's bytes changed.
fn relayout(img: &mut Image, align: usize, padding: bool) -> bool {
    let mut changed = false;
    for v in img.entries.values_mut() {
        let Some(f) = Frame::parse(v) else { continue };
        let conforming = f.encode(8, true);
        let new = f.encode(align, padding);
        if new != conforming {
            *v = new;
            changed = true;
        }
    }
    changed
}

fn reverse_elements(dtype: &str, bytes: &mut [u8]) {
    let part = match dtype {
        "c64" => 4,
        "c128" => 8,
        other => match crate::inspect::frame_bytes::dtype_kind(other) {
            Some(crate::inspect::frame_bytes::DtypeKind::Buffer(n)) => n as usize,
            _ => 1,
        },
    };
    if part > 1 {
        bytes.chunks_exact_mut(part).for_each(<[u8]>::reverse);
    }
}

fn swap_complex(dtype: &str, bytes: &mut [u8]) -> bool {
    let part = match dtype {
        "c64" => 4,
        "c128" => 8,
        _ => return false,
    };
    for pair in bytes.chunks_exact_mut(2 * part) {
        let (re, im) = pair.split_at_mut(part);
        re.swap_with_slice(im);
    }
    true
}

fn ones_to(bytes: &mut [u8], to: u8) -> bool {
    let mut changed = false;
    for b in bytes.iter_mut().filter(|b| **b == 1) {
        *b = to;
        changed = true;
    }
    changed
}

fn string_column_major(f: &mut Frame) -> bool {
    let mut changed = false;
    let Some(blocks) = f.header.get_mut("blocks").and_then(Value::as_object_mut) else {
        return false;
    };
    for block in blocks.values_mut() {
        for col in block
            .get_mut("columns")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|c| c.values_mut())
        {
            if col.get("dtype") != Some(&Value::from("string")) {
                continue;
            }
            let shape: Vec<usize> = col["shape"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter_map(|d| d.as_u64().map(|d| d as usize))
                        .collect()
                })
                .unwrap_or_default();
            let rows = shape.first().copied().unwrap_or(0);
            let width: usize = shape.iter().skip(1).product();
            if rows < 2 || width < 2 {
                continue;
            }
            let Some(values) = col.get("values").and_then(Value::as_array).cloned() else {
                continue;
            };
            if values.len() != rows * width {
                continue;
            }
            let transposed: Vec<Value> = (0..rows * width)
                .map(|k| values[(k % rows) * width + k / rows].clone())
                .collect();
            if transposed != values {
                col["values"] = Value::Array(transposed);
                changed = true;
            }
        }
    }
    changed
}

/// The headers of each record's updates, edited with the record's number;
/// payloads kept.
fn per_record(
    img: &mut Image,
    mut edit: impl FnMut(usize, &mut [Map<String, Value>]) -> bool,
) -> bool {
    let mut changed = false;
    for (r, (first, n)) in img.spans().into_iter().enumerate() {
        let frames: Vec<Frame> = (first..first + n)
            .filter_map(|j| img.frame(Key::Frame(j)))
            .collect();
        if frames.len() as u64 != n {
            continue;
        }
        let mut headers: Vec<Map<String, Value>> =
            frames.iter().map(|f| f.header.clone()).collect();
        if edit(r, &mut headers) {
            for (k, (mut f, h)) in frames.into_iter().zip(headers).enumerate() {
                f.header = h;
                img.set_frame(Key::Frame(first + k as u64), &f);
            }
            changed = true;
        }
    }
    changed
}

fn shifted_meta(img: &mut Image) -> bool {
    per_record(img, |_, ups| {
        let metas: Vec<Option<Value>> = ups.iter().map(|h| h.get("meta").cloned()).collect();
        let mut changed = false;
        for (k, h) in ups.iter_mut().enumerate().skip(1) {
            if let Some(m) = &metas[k - 1] {
                changed |= h.get("meta") != Some(m);
                h.insert("meta".into(), m.clone());
            }
        }
        changed
    })
}

fn box_across_records(img: &mut Image) -> bool {
    let mut last: Option<Value> = None;
    let mut changed = false;
    for (first, n) in img.spans() {
        if n == 0 {
            continue;
        }
        let Some(mut f) = img.frame(Key::Frame(first)) else {
            continue;
        };
        let stated = f.header.get("box").filter(|b| !b.is_null()).cloned();
        if stated.is_some() && stated == last {
            f.header.remove("box");
            img.set_frame(Key::Frame(first), &f);
            changed = true;
        }
        // The writer's state: the cell in effect at the record's end.
        for j in first..first + n {
            if let Some(b) = img
                .frame(Key::Frame(j))
                .and_then(|f| f.header.get("box").filter(|b| !b.is_null()).cloned())
            {
                last = Some(b);
            }
        }
    }
    changed
}

/// A block as stored in one update: its header entry without offsets, and
/// its buffers, for comparing two updates of it.
#[derive(Clone, PartialEq)]
struct Stored {
    entry: Value,
    buffers: Vec<((String, bool), Vec<u8>)>,
}

fn stored_blocks(f: &Frame) -> BTreeMap<String, Stored> {
    let mut out = BTreeMap::new();
    for (name, entry) in f
        .header
        .get("blocks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut entry = entry.clone();
        for col in entry
            .get_mut("columns")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|c| c.values_mut())
        {
            if let Some(c) = col.as_object_mut() {
                c.remove("offset");
                if c.contains_key("validity") {
                    c.insert("validity".into(), Value::Bool(true));
                }
            }
        }
        let buffers = f
            .buffers
            .iter()
            .filter(|((b, _, _), _)| b == name)
            .map(|((_, c, m), v)| ((c.clone(), *m), v.clone()))
            .collect();
        out.insert(name.clone(), Stored { entry, buffers });
    }
    out
}

fn remove_block(f: &mut Frame, name: &str) {
    if let Some(b) = f.header.get_mut("blocks").and_then(Value::as_object_mut) {
        b.remove(name);
    }
    f.buffers.retain(|(b, _, _), _| b != name);
}

fn blocks_across_records(img: &mut Image) -> bool {
    let mut state: BTreeMap<String, Stored> = BTreeMap::new();
    let mut changed = false;
    for (first, n) in img.spans() {
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let stored = stored_blocks(&f);
            if j == first {
                let same: Vec<&String> = stored
                    .iter()
                    .filter(|(k, s)| state.get(*k) == Some(s))
                    .map(|(k, _)| k)
                    .collect();
                if !same.is_empty() {
                    for k in same {
                        remove_block(&mut f, k);
                    }
                    img.set_frame(Key::Frame(j), &f);
                    changed = true;
                }
            }
            state.extend(stored);
        }
    }
    changed
}

#[derive(Clone, Copy)]
enum Compare {
    /// f64 and complex parts by value, as `numpy.array_equal(a, b,
    /// equal_nan=True)` does: -0.0 equals 0.0, and every NaN every NaN.
    ByValue,
    /// Masks left out of the comparison.
    WithoutMasks,
}

fn equal_by(kind: Compare, dtypes: &BTreeMap<String, String>, a: &Stored, b: &Stored) -> bool {
    if a.entry != b.entry && !matches!(kind, Compare::WithoutMasks) {
        return false;
    }
    let a_bufs: BTreeMap<_, _> = a.buffers.iter().cloned().collect();
    let b_bufs: BTreeMap<_, _> = b.buffers.iter().cloned().collect();
    if matches!(kind, Compare::WithoutMasks) {
        let strip = |e: &Value| {
            let mut e = e.clone();
            for col in e
                .get_mut("columns")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flat_map(|c| c.values_mut())
            {
                if let Some(c) = col.as_object_mut() {
                    c.remove("validity");
                }
            }
            e
        };
        if strip(&a.entry) != strip(&b.entry) {
            return false;
        }
        return a_bufs
            .iter()
            .filter(|((_, m), _)| !m)
            .all(|(k, v)| b_bufs.get(k) == Some(v));
    }
    if a_bufs.keys().ne(b_bufs.keys()) {
        return false;
    }
    a_bufs.iter().all(|((c, m), x)| {
        let y = &b_bufs[&(c.clone(), *m)];
        let width = match dtypes.get(c).map(String::as_str) {
            Some("f64" | "c128") if !m => 8,
            Some("c64") if !m => 4,
            _ => return x == y,
        };
        x.len() == y.len()
            && x.chunks_exact(width)
                .zip(y.chunks_exact(width))
                .all(|(p, q)| {
                    let (p, q) = if width == 8 {
                        (
                            f64::from_le_bytes(p.try_into().unwrap_or_default()),
                            f64::from_le_bytes(q.try_into().unwrap_or_default()),
                        )
                    } else {
                        (
                            f32::from_le_bytes(p.try_into().unwrap_or_default()).into(),
                            f32::from_le_bytes(q.try_into().unwrap_or_default()).into(),
                        )
                    };
                    p == q || (p.is_nan() && q.is_nan())
                })
    })
}

/// A later update of a block left out where the buggy comparison calls it
/// unchanged but it is not bit for bit.
fn unchanged_dropped(img: &mut Image, kind: Compare) -> bool {
    let mut changed = false;
    for (first, n) in img.spans() {
        // What the buggy writer believes each block holds.
        let mut believed: BTreeMap<String, Stored> = BTreeMap::new();
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let mut dropped = false;
            for (name, s) in stored_blocks(&f) {
                let dtypes: BTreeMap<String, String> = columns_of(&f, &name)
                    .into_iter()
                    .filter_map(|c| Some((c.clone(), f.dtype(&name, &c)?)))
                    .collect();
                match believed.get(&name) {
                    Some(prev) if *prev != s && equal_by(kind, &dtypes, prev, &s) => {
                        remove_block(&mut f, &name);
                        dropped = true;
                    }
                    _ => {
                        believed.insert(name, s);
                    }
                }
            }
            if dropped {
                img.set_frame(Key::Frame(j), &f);
                changed = true;
            }
        }
    }
    changed
}

fn omission_as_zero_row(img: &mut Image) -> bool {
    let declared = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for (first, n) in img.spans() {
        if n == 0 {
            continue;
        }
        let Some(mut f) = img.frame(Key::Frame(first)) else {
            continue;
        };
        let present: Vec<String> = f
            .header
            .get("blocks")
            .and_then(Value::as_object)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        let mut added = false;
        for (name, decl) in &declared {
            if present.contains(name) {
                continue;
            }
            let mut columns = Map::new();
            for (col, c) in decl
                .get("columns")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let dtype = c.get("dtype").and_then(Value::as_str).unwrap_or("f64");
                let mut shape = vec![Value::from(0)];
                shape.extend(
                    c.get("trailing")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
                let mut entry = serde_json::json!({"dtype": dtype, "shape": shape});
                if dtype == "string" {
                    entry["values"] = serde_json::json!([]);
                } else {
                    f.buffers
                        .insert((name.clone(), col.clone(), false), Vec::new());
                }
                columns.insert(col.clone(), entry);
            }
            let mut entry =
                serde_json::json!({"count": 0, "structural_shape": null, "columns": columns});
            if let Some(t) = decl.get("targets").filter(|t| !t.is_null()) {
                entry["targets"] = t.clone();
            }
            if let Some(b) = f.header.get_mut("blocks").and_then(Value::as_object_mut) {
                b.insert(name.clone(), entry);
                added = true;
            }
        }
        if added {
            img.set_frame(Key::Frame(first), &f);
            changed = true;
        }
    }
    changed
}

fn edit_undefined_cells(
    img: &mut Image,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    img.edit_headers(b'f', |h| {
        match h.get_mut("box").and_then(Value::as_object_mut) {
            Some(c) if c.get("cell_defined") == Some(&Value::Bool(false)) => edit(c),
            _ => false,
        }
    })
}

fn precision_on_updates(img: &mut Image) -> bool {
    let declared = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .cloned()
        .unwrap_or_default();
    img.edit_headers(b'f', |h| {
        let mut changed = false;
        for (name, block) in h
            .get_mut("blocks")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flatten()
        {
            for (col, c) in block
                .get_mut("columns")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flatten()
            {
                let p = declared
                    .get(name)
                    .and_then(|b| b.get("columns"))
                    .and_then(|cs| cs.get(col))
                    .and_then(|d| d.get("precision"));
                if let (Some(p), Some(c)) = (p, c.as_object_mut()) {
                    c.insert("precision".into(), p.clone());
                    changed = true;
                }
            }
        }
        changed
    })
}

/// f64 buffers of columns with a declared precision, each nonzero finite
/// value moved by one unit in the last place.
fn off_grid(img: &mut Image) -> bool {
    let declared = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .cloned()
        .unwrap_or_default();
    let nudge = |bytes: &mut Vec<u8>| {
        let mut changed = false;
        for c in bytes.chunks_exact_mut(8) {
            let x = f64::from_le_bytes(c.try_into().unwrap_or_default());
            if x != 0.0 && x.is_finite() {
                c.copy_from_slice(&f64::from_bits(x.to_bits() + 1).to_le_bytes());
                changed = true;
            }
        }
        changed
    };
    let own = |f: &mut Frame| {
        let with: Vec<(String, String)> = f
            .buffers
            .keys()
            .filter(|(b, c, m)| {
                !m && f
                    .header
                    .get("blocks")
                    .and_then(|x| x.get(b))
                    .and_then(|x| x.get("columns"))
                    .and_then(|x| x.get(c))
                    .and_then(|x| x.get("precision"))
                    .is_some()
            })
            .map(|(b, c, _)| (b.clone(), c.clone()))
            .collect();
        with.into_iter().fold(false, |ch, (b, c)| {
            f.buffers.get_mut(&(b, c, false)).is_some_and(&nudge) | ch
        })
    };
    let a = edit_frames_with(img, b's', own);
    let b = edit_index(img, own);
    let c = edit_frames_with(img, b'f', |f| {
        let with: Vec<(String, String)> = f
            .buffers
            .keys()
            .filter(|(b, c, m)| {
                !m && declared
                    .get(b)
                    .and_then(|x| x.get("columns"))
                    .and_then(|x| x.get(c))
                    .and_then(|x| x.get("precision"))
                    .is_some()
            })
            .map(|(b, c, _)| (b.clone(), c.clone()))
            .collect();
        with.into_iter().fold(false, |ch, (b, c)| {
            f.buffers.get_mut(&(b, c, false)).is_some_and(&nudge) | ch
        })
    });
    a | b | c
}

fn edit_ff(img: &mut Image, edit: impl FnOnce(&mut Frame) -> bool) -> bool {
    let Some(mut f) = img
        .entries
        .get(b"ff".as_slice())
        .and_then(|v| Frame::parse(v))
    else {
        return false;
    };
    let changed = edit(&mut f);
    if changed {
        img.entries.insert(b"ff".to_vec(), f.encode(8, true));
    }
    changed
}

fn frames_u32(img: &mut Image) -> bool {
    let frames: Vec<Vec<u8>> = img
        .entries
        .keys()
        .filter(|k| k.len() == 9 && k[0] == b'f')
        .cloned()
        .collect();
    for k in &frames {
        let j = u64::from_be_bytes(k[1..].try_into().unwrap_or_default());
        let mut key = vec![b'f'];
        key.extend_from_slice(&(j as u32).to_be_bytes());
        img.rename(k, key);
    }
    !frames.is_empty()
}

/// Each element of an f64 buffer replaced by its difference from the one
/// before (a delta filter, as Zarr's codecs offer); whether one changed.
fn delta(bytes: &mut [u8]) -> bool {
    let values: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    let mut changed = false;
    for (k, c) in bytes.chunks_exact_mut(8).enumerate().skip(1) {
        let d = values[k] - values[k - 1];
        changed |= d.to_bits() != values[k].to_bits();
        c.copy_from_slice(&d.to_le_bytes());
    }
    changed
}

/// Integer columns narrower than 64 bits widened (sign- or zero-extended).
fn widen_ints(f: &mut Frame) -> bool {
    let mut changed = false;
    let keys: Vec<(String, String, bool)> = f.buffers.keys().filter(|k| !k.2).cloned().collect();
    for (b, c, m) in keys {
        let Some(dtype) = f.dtype(&b, &c) else {
            continue;
        };
        let (wide, size, signed) = match dtype.as_str() {
            "i8" => ("i64", 1, true),
            "i16" => ("i64", 2, true),
            "i32" => ("i64", 4, true),
            "u8" => ("u64", 1, false),
            "u16" => ("u64", 2, false),
            "u32" => ("u64", 4, false),
            _ => continue,
        };
        let Some(bytes) = f.buffers.get_mut(&(b.clone(), c.clone(), m)) else {
            continue;
        };
        let widened: Vec<u8> = bytes
            .chunks_exact(size)
            .flat_map(|e| {
                let mut v = [0u8; 8];
                v[..size].copy_from_slice(e);
                if signed && e[size - 1] & 0x80 != 0 {
                    v[size..].fill(0xFF);
                }
                v
            })
            .collect();
        *bytes = widened;
        set_column_key(f, &b, &c, "dtype", Value::from(wide));
        changed = true;
    }
    changed
}

/// The records in reverse order: keys, frames and the index's rows.
fn reverse_records(img: &mut Image) -> bool {
    let spans = img.spans();
    let n = spans.len();
    if n < 2 {
        return false;
    }
    let Some(mut index) = img.frame(Key::Index) else {
        return false;
    };
    let before = img.entries.clone();
    let mut frames = Vec::new();
    let mut first_frame = Vec::with_capacity(n);
    let mut n_frames = Vec::with_capacity(n);
    let mut moved = BTreeMap::new();
    for (new_r, old_r) in (0..n).rev().enumerate() {
        let (first, count) = spans[old_r];
        first_frame.push(frames.len() as u64);
        n_frames.push(count);
        for j in first..first + count {
            frames.push(
                img.entries
                    .remove(&Key::Frame(j).encode())
                    .unwrap_or_default(),
            );
        }
        for key in [Key::Record(old_r as u64), Key::System(old_r as u64)] {
            if let Some(v) = before.get(&key.encode()) {
                let new_key = match key {
                    Key::Record(_) => Key::Record(new_r as u64),
                    _ => Key::System(new_r as u64),
                };
                moved.insert(new_key.encode(), v.clone());
            }
        }
    }
    img.entries
        .retain(|k, _| !(k.len() == 9 && (k[0] == b'r' || k[0] == b's')));
    img.entries.extend(moved);
    for (j, v) in frames.into_iter().enumerate() {
        img.entries.insert(Key::Frame(j as u64).encode(), v);
    }
    for bytes in index.buffers.values_mut() {
        let row = bytes.len() / n;
        if row > 0 {
            *bytes = bytes.chunks_exact(row).rev().flatten().copied().collect();
        }
    }
    for block in index
        .header
        .get_mut("blocks")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|b| b.values_mut())
    {
        for col in block
            .get_mut("columns")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|c| c.values_mut())
        {
            if let Some(values) = col.get_mut("values").and_then(Value::as_array_mut) {
                let row = values.len() / n;
                if row > 0 {
                    let reversed: Vec<Value> =
                        values.chunks_exact(row).rev().flatten().cloned().collect();
                    *values = reversed;
                }
            }
        }
    }
    let slot = |name: &str| ("records".to_string(), name.to_string(), false);
    index.buffers.insert(
        slot("first_frame"),
        first_frame.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    index.buffers.insert(
        slot("n_frames"),
        n_frames.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    img.set_frame(Key::Index, &index);
    img.entries != before
}

/// A writer derives the declaration it was not handed from the first
/// record with frames only.
fn schema_from_first_record(img: &mut Image, fixture: &Value) -> bool {
    if fixture.get("sequence_schema").is_some() {
        return false;
    }
    let Some(&span) = img.spans().iter().find(|s| s.1 > 0) else {
        return false;
    };
    let seen: std::collections::BTreeSet<String> = img
        .updates(span)
        .iter()
        .flat_map(|h| {
            h.get("blocks")
                .and_then(Value::as_object)
                .map(|b| b.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect();
    edit_meta(img, |m| {
        let Some(blocks) = m
            .pointer_mut("/sequence_schema/blocks")
            .and_then(Value::as_object_mut)
        else {
            return false;
        };
        let before = blocks.len();
        blocks.retain(|k, _| seen.contains(k));
        blocks.len() != before
    })
}

/// Blocks other than `atoms` written only at their first update in each
/// record.
fn topology_once(img: &mut Image) -> bool {
    let mut changed = false;
    for (first, n) in img.spans() {
        let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let names: Vec<String> = f
                .header
                .get("blocks")
                .and_then(Value::as_object)
                .map(|b| b.keys().cloned().collect())
                .unwrap_or_default();
            let mut dropped = false;
            for name in names.into_iter().filter(|n| n != "atoms") {
                if !seen.insert(name.clone()) {
                    remove_block(&mut f, &name);
                    dropped = true;
                }
            }
            if dropped {
                img.set_frame(Key::Frame(j), &f);
                changed = true;
            }
        }
    }
    changed
}

/// An aligned block left out of an update where its target's row count
/// changes.
fn aligned_not_restated(img: &mut Image) -> bool {
    let aligned: Vec<(String, String)> = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, b)| Some((name.clone(), b.get("aligned_with")?.as_str()?.to_string())))
        .collect();
    let mut changed = false;
    for (first, n) in img.spans() {
        let mut rows: BTreeMap<String, u64> = BTreeMap::new();
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let count = |f: &Frame, b: &str| f.header.get("blocks")?.get(b)?.get("count")?.as_u64();
            let mut dropped = false;
            for (block, target) in &aligned {
                let Some(now) = count(&f, target) else {
                    continue;
                };
                let grew = rows.get(target).is_some_and(|&was| was != now);
                if grew && j > first && count(&f, block).is_some() {
                    remove_block(&mut f, block);
                    dropped = true;
                }
            }
            for (_, target) in &aligned {
                if let Some(now) = count(&f, target) {
                    rows.insert(target.clone(), now);
                }
            }
            if dropped {
                img.set_frame(Key::Frame(j), &f);
                changed = true;
            }
        }
    }
    changed
}

/// System meta values the fixture leaves untagged and gives as integers,
/// tagged and written as f64.
fn numbers_as_f64(img: &mut Image, fixture: &Value) -> bool {
    let records = fixture
        .get("records")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for (r, record) in records.iter().enumerate() {
        let Some(system) = record.get("system") else {
            continue;
        };
        let given = system
            .get("meta_types")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let untagged_ints: Vec<String> = system
            .get("meta")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(k, v)| !given.contains_key(*k) && (v.is_i64() || v.is_u64()))
            .map(|(k, _)| k.clone())
            .collect();
        if untagged_ints.is_empty() {
            continue;
        }
        let Some(mut f) = img.frame(Key::System(r as u64)) else {
            continue;
        };
        for k in &untagged_ints {
            if let Some(v) = f.header.get_mut("meta").and_then(|m| m.get_mut(k)) {
                *v = Value::from(v.as_f64().unwrap_or_default());
            }
            if let Some(t) = f
                .header
                .get_mut("meta_types")
                .and_then(Value::as_object_mut)
            {
                t.insert(k.clone(), Value::from("f64"));
            }
        }
        img.set_frame(Key::System(r as u64), &f);
        changed = true;
    }
    changed
}
