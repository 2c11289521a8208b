//! How a file stores what a reader resolves: each record's updates (the
//! blocks they hold, the cells they state) and where validity masks sit.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::super::image::Image;
use crate::inspect::Key;

/// How a file stores each record's trajectory.
#[derive(Debug, Default)]
pub struct Stored {
    /// Per record, per update: the blocks it holds, with their row counts.
    pub blocks: Vec<Vec<BTreeMap<String, u64>>>,
    /// Per record, per update: the cell it states, as stored.
    pub cells: Vec<Vec<Option<Value>>>,
    /// The columns whose validity mask is stored at payload offset 0:
    /// where, the block and the column. A reader that tests the offset for
    /// truth instead of presence misses exactly these masks.
    pub masks_at_zero: BTreeSet<(Place, String, String)>,
}

/// Which value of a file a stored column is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// The index (`index`): the collection's own columns.
    Index,
    /// The force field (`ff`).
    ForceField,
    /// Record `r`'s system (`s` + u64be(r)).
    System(usize),
    /// Record `r`'s update at record-local ordinal `k`.
    Update(usize, usize),
}

impl Stored {
    /// The layout of the file `image`.
    pub fn of(image: &Image) -> Stored {
        let mut out = Stored::default();
        let mut at_zero = BTreeSet::new();
        let mut masks = |place: Place, header: &Map<String, Value>| {
            for (block, b) in header
                .get("blocks")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                for (column, c) in b
                    .get("columns")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    if c.get("validity").and_then(Value::as_u64) == Some(0) {
                        at_zero.insert((place, block.clone(), column.clone()));
                    }
                }
            }
        };
        for (place, key) in [
            (Place::Index, Key::Index),
            (Place::ForceField, Key::ForceField),
        ] {
            if let Some(f) = image.frame(key) {
                masks(place, &f.header);
            }
        }
        for r in 0..image.spans().len() {
            if let Some(f) = image.frame(Key::System(r as u64)) {
                masks(Place::System(r), &f.header);
            }
        }
        for (r, span) in image.spans().into_iter().enumerate() {
            let headers = image.updates(span);
            for (k, h) in headers.iter().enumerate() {
                masks(Place::Update(r, k), h);
            }
            out.blocks.push(
                headers
                    .iter()
                    .map(|h| {
                        h.get("blocks")
                            .and_then(Value::as_object)
                            .into_iter()
                            .flatten()
                            .map(|(k, b)| (k.clone(), b["count"].as_u64().unwrap_or(0)))
                            .collect()
                    })
                    .collect(),
            );
            out.cells.push(
                headers
                    .iter()
                    .map(|h| h.get("box").filter(|b| !b.is_null()).cloned())
                    .collect(),
            );
        }
        out.masks_at_zero = at_zero;
        out
    }
}
