//! One update of a record's walk ([`Walked`], what
//! [`RecordTxn::walk_updates`](super::RecordTxn) hands the resolver and the
//! views) and the checks of an update against the declaration that both
//! read paths share.

use crate::clause::Clause;
use crate::error::{refuse, Error, Result};
use crate::frame_bytes::{BlockRef, FrameInfo, FrameRef};
use crate::lmdb::layout::Layout;
use crate::model::*;
use crate::typed_json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One update of a record's walk ([`RecordTxn::walk_updates`]).
pub(crate) struct Walked<'t> {
    /// The record.
    pub r: u64,
    /// The frame's index in the record.
    pub k: u64,
    /// The whole value.
    pub value: &'t [u8],
    /// Its payload (from the first 8-aligned byte after the header).
    pub payload: &'t [u8],
    /// The update's blocks, checked against the declaration; `None` when
    /// its `blocks` text is the last full update's (the same blocks, their
    /// buffers at the same offsets of this payload) or when `layout` has it.
    pub blocks: Option<BTreeMap<String, BlockRef<'t>>>,
    /// The update's layout, on the resolver's walk.
    pub layout: Option<Arc<Layout>>,
    /// Meta, step, time and cell, not checked against the declaration.
    pub info: FrameInfo,
}

impl Walked<'_> {
    /// `e` located at this frame of the record.
    pub fn located(&self, e: Error) -> Error {
        e.within(&format!(
            "records[{}].trajectory.frames[{}]",
            self.r, self.k
        ))
    }
}

/// Checks an update's per-step meta against the declaration and returns
/// its step; error paths are relative to the frame.
pub(crate) fn update_step(info: &FrameInfo, schema: &SequenceSchema) -> Result<i64> {
    check_update_meta(info, schema)?;
    match info.step {
        Some(step) => Ok(step),
        None => Err(Error::refused(
            Clause::FrameStep,
            "step",
            "a trajectory update carries no step",
        )),
    }
}

/// Checks one update's blocks against the declaration; error paths are
/// relative to the frame.
pub(super) fn check_update_blocks(frame: &FrameRef<'_>, schema: &SequenceSchema) -> Result<()> {
    for (name, block) in &frame.blocks {
        let Some(decl) = schema.blocks.get(name.as_str()) else {
            refuse!(
                FrameUndeclaredBlock,
                format!("blocks.{name}"),
                "block `{name}` is not declared in sequence_schema"
            );
        };
        for (col, column) in &block.columns {
            let declared = decl.columns.get(col.as_str());
            let fits = declared.is_some_and(|cd| {
                cd.dtype == column.dtype
                    && column.shape.get(1..).unwrap_or_default() == cd.trailing.as_slice()
            });
            if !fits {
                refuse!(
                    FrameUndeclaredBlock,
                    format!("blocks.{name}.columns.{col}"),
                    "{} {:?} is not a declared column of `{name}` (declared: {:?})",
                    column.dtype,
                    column.shape,
                    declared.map(|cd| (cd.dtype.name(), &cd.trailing))
                );
            }
        }
    }
    Ok(())
}

/// Checks one update's per-step meta against the declaration.
pub(super) fn check_update_meta(info: &FrameInfo, schema: &SequenceSchema) -> Result<()> {
    // The common case: exactly the declared keys (both maps are sorted).
    if info.meta.len() == schema.meta.len()
        && info
            .meta
            .keys()
            .zip(schema.meta.keys())
            .all(|(a, b)| a == b)
    {
        for ((key, v), decl) in info.meta.iter().zip(schema.meta.values()) {
            typed_json::check(decl.tag, v)
                .map_err(|e| Error::refused(Clause::TypedValue, format!("meta.{key}"), e))?;
        }
        return Ok(());
    }
    if let Some(key) = info.meta.keys().find(|k| !schema.meta.contains_key(*k)) {
        refuse!(
            FrameUndeclaredMeta,
            format!("meta.{key}"),
            "per-step key `{key}` is not declared"
        );
    }
    for (key, decl) in &schema.meta {
        match info.meta.get(key) {
            None => refuse!(
                StepMetaRequired,
                format!("meta.{key}"),
                "declared per-step key `{key}` is missing"
            ),
            Some(v) => typed_json::check(decl.tag, v)
                .map_err(|e| Error::refused(Clause::TypedValue, format!("meta.{key}"), e))?,
        }
    }
    Ok(())
}
