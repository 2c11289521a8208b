"""Records and structures as Arrow tables, and records back from them: the
blocks ``mrec.ray`` reads and writes (docs/shards.md, "Ray Data").

Columns, never Python objects per row: a batch's flat arrays and offsets
(what ``Collection.batch`` and ``Structures.batch`` gather in Rust) become
Arrow list arrays over the same values, one row per record or structure.

A record row (``unit="record"``): ``record`` (int64, its number in the
set), ``meta`` (its meta document as JSON text), ``has_trajectory``,
``n_frames``; per frame ``step``, ``time`` (null without times), each
declared per-step key as ``meta.<key>`` (a ``json`` key as JSON text);
for each declared trajectory block ``<block>.present``, ``<block>.count``
and each declared column ``<block>.<column>`` (frames -> rows; an invalid
row is an Arrow null, a trailing shape a fixed-size list); the cell in
effect as ``cell.present``, ``cell.vectors`` (9 values, lattice vectors as
columns, molrec's order), ``cell.origin``, ``cell.boundary``,
``cell.defined``; the system as ``system`` (JSON text of its ``meta``,
``meta_types`` and ``cell``, null without a system) and, for each system
block and column the set's records have, ``system.<block>.count`` and
``system.<block>.<column>`` (rows).

A structure row (``unit="frame"``): the arrays of :class:`mrec.Structures`
(per-atom ones as lists over the structure's atoms), plus ``index`` (the
frame's ordinal in the set), ``record`` and ``frame``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import pyarrow as pa

#: molrec dtypes as NumPy dtypes (string: object; complex: two floats).
DTYPES = {
    "f64": np.float64,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "bool": np.bool_,
    "string": object,
    "c64": np.complex64,
    "c128": np.complex128,
}


@dataclass
class RecordLayout:
    """The columns of a set's record rows, fixed once for every read task
    (so that every block has one schema): the declared per-step keys and
    trajectory columns, and the system columns found in its records."""

    step_keys: List[Tuple[str, str]] = field(default_factory=list)
    #: block -> [(column, dtype, trailing shape)]
    blocks: Dict[str, List[Tuple[str, str, Tuple[int, ...]]]] = field(default_factory=dict)
    system: Dict[str, List[Tuple[str, str, Tuple[int, ...]]]] = field(default_factory=dict)

    @classmethod
    def of(cls, schema: Mapping[str, Any], system_batch: Optional[Mapping[str, Any]]) -> "RecordLayout":
        """The layout of a collection with ``schema`` whose records' systems
        ``system_batch`` (a batch's ``system``) shows."""
        layout = cls()
        for key, decl in sorted(schema.get("meta", {}).items()):
            layout.step_keys.append((key, decl.get("dtype", "json")))
        for block, decl in sorted(schema.get("blocks", {}).items()):
            layout.blocks[block] = [
                (col, c.get("dtype", "f64"), tuple(int(x) for x in c.get("shape", ())[1:]))
                for col, c in sorted(decl.get("columns", {}).items())
            ]
        for block, b in sorted((system_batch or {}).get("blocks", {}).items()):
            layout.system[block] = [(col, _dtype_name(v), tuple(v.shape[1:])) for col, v in sorted(b["columns"].items())]
        return layout

    def absorb_trailing(self, batch: Mapping[str, Any]) -> None:
        """Takes the trailing shapes of declared columns from a batch (the
        declaration does not always state them)."""
        for block, cols in self.blocks.items():
            b = batch["trajectory"]["blocks"].get(block)
            if b is None:
                continue
            self.blocks[block] = [
                (col, dtype, tuple(b["columns"][col].shape[1:]) if col in b["columns"] else trailing)
                for col, dtype, trailing in cols
            ]


def _dtype_name(a: np.ndarray) -> str:
    for name, dt in DTYPES.items():
        if dt is object and a.dtype == object:
            return name
        if dt is not object and a.dtype == np.dtype(dt):
            return name
    raise TypeError(f"no molrec dtype for {a.dtype}")


def _arrow_values(a: np.ndarray, valid: Optional[np.ndarray] = None) -> pa.Array:
    """A flat array of rows ``(rows, *trailing)`` as Arrow: the trailing
    axes as fixed-size lists, a complex value as two floats, an invalid row
    (``valid`` false) as null."""
    trailing = tuple(a.shape[1:])
    mask = None if valid is None or np.all(valid) else ~np.asarray(valid, bool)
    if a.dtype == object:
        flat = np.asarray([str(x) for x in a.reshape(-1)], dtype=object)
        kind: Optional[pa.DataType] = pa.string()
    elif a.dtype.kind == "c":
        flat = np.ascontiguousarray(np.stack([a.real, a.imag], axis=-1)).reshape(-1)
        trailing, kind = trailing + (2,), None
    else:
        flat, kind = np.ascontiguousarray(a).reshape(-1), None
    if not trailing:
        return pa.array(flat, kind, mask=mask)
    arr: pa.Array = pa.array(flat, kind)
    for i, w in enumerate(reversed(trailing)):
        outermost = i == len(trailing) - 1
        arr = pa.FixedSizeListArray.from_arrays(arr, w, mask=pa.array(mask) if outermost and mask is not None else None)
    return arr


def _lists(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    return pa.LargeListArray.from_arrays(pa.array(np.asarray(offsets, np.int64)), values)


def _empty(dtype: str, trailing: Tuple[int, ...], rows: int) -> np.ndarray:
    dt = DTYPES[dtype]
    if dt is object:
        return np.full((rows,) + trailing, "", dtype=object)
    return np.zeros((rows,) + trailing, dtype=dt)


def records_table(batch: Mapping[str, Any], first_record: int, has_trajectory: np.ndarray, layout: RecordLayout) -> pa.Table:
    """A batch of records (``Collection.batch`` of one shard) as record
    rows; ``first_record`` is the shard's first record in the set."""
    n = len(batch["records"])
    cols: Dict[str, pa.Array] = {
        "record": pa.array(np.asarray(batch["records"], np.int64) + first_record),
        "meta": pa.array([json.dumps(m, allow_nan=True) for m in batch["meta"]], pa.string()),
        "has_trajectory": pa.array(np.asarray(has_trajectory, bool)),
    }
    t = batch["trajectory"]
    toff = np.asarray(t["offsets"], np.int64)
    frames = int(toff[-1])
    cols["n_frames"] = pa.array(np.diff(toff))
    cols["step"] = _lists(toff, pa.array(t["step"]))
    time = t["time"] if t["time"] is not None else np.full(frames, np.nan)
    cols["time"] = _lists(toff, pa.array(time, mask=np.full(frames, t["time"] is None)))
    for key, tag in layout.step_keys:
        values = t["meta"].get(key)
        if values is None:
            arr = pa.nulls(frames, pa.string())
        elif isinstance(values, list) or tag == "json":
            arr = pa.array([json.dumps(v, allow_nan=True) for v in values], pa.string())
        else:
            arr = _arrow_values(np.asarray(values))
        cols[f"meta.{key}"] = _lists(toff, arr)
    for block, columns in layout.blocks.items():
        b = t["blocks"].get(block)
        if b is None:
            b = {"present": np.zeros(frames, bool), "count": np.zeros(frames, np.int64),
                 "offsets": np.zeros(frames + 1, np.int64), "columns": {}, "validity": {}}
        rows = int(b["offsets"][-1])
        cols[f"{block}.present"] = _lists(toff, pa.array(np.asarray(b["present"], bool)))
        cols[f"{block}.count"] = _lists(toff, pa.array(np.asarray(b["count"], np.int64)))
        for col, dtype, trailing in columns:
            values = b["columns"].get(col)
            valid = b["validity"].get(col)
            if values is None:
                values, valid = _empty(dtype, trailing, rows), np.zeros(rows, bool)
            cols[f"{block}.{col}"] = _lists(toff, _lists(b["offsets"], _arrow_values(values, valid)))
    cell = t["cell"]
    if cell is None:
        cell = {"present": np.zeros(frames, bool), "vectors": np.zeros((frames, 3, 3)),
                "origin": np.zeros((frames, 3)), "boundary": np.zeros((frames, 3), bool),
                "defined": np.zeros(frames, bool)}
    cols["cell.present"] = _lists(toff, pa.array(np.asarray(cell["present"], bool)))
    cols["cell.vectors"] = _lists(toff, _arrow_values(np.asarray(cell["vectors"], np.float64).reshape(frames, 9)))
    cols["cell.origin"] = _lists(toff, _arrow_values(np.asarray(cell["origin"], np.float64)))
    cols["cell.boundary"] = _lists(toff, _arrow_values(np.asarray(cell["boundary"], bool)))
    cols["cell.defined"] = _lists(toff, pa.array(np.asarray(cell["defined"], bool)))
    s = batch["system"]
    docs = []
    for i in range(n):
        if not s["present"][i]:
            docs.append(None)
            continue
        c = s["cell"][i] if s["cell"] is not None else None
        docs.append(json.dumps({"meta": s["meta"][i], "meta_types": s["meta_types"][i], "cell": _cell_json(c)}, allow_nan=True))
    cols["system"] = pa.array(docs, pa.string())
    for block, columns in layout.system.items():
        b = s["blocks"].get(block)
        if b is None:
            b = {"present": np.zeros(n, bool), "count": np.zeros(n, np.int64),
                 "offsets": np.zeros(n + 1, np.int64), "columns": {}, "validity": {}}
        unplanned = set(b["columns"]) - {c for c, _, _ in columns}
        if unplanned:
            raise ValueError(
                f"system block `{block}` has columns {sorted(unplanned)} that the set's first records' "
                f"systems lack: the record layout is fixed from those (read with unit='frame', or "
                f"read these records with mrec.open)"
            )
        rows = int(b["offsets"][-1])
        absent = ~np.asarray(b["present"], bool)
        cols[f"system.{block}.count"] = pa.array(np.asarray(b["count"], np.int64), mask=absent)
        for col, dtype, trailing in columns:
            values = b["columns"].get(col)
            valid = b["validity"].get(col)
            if values is None:
                values, valid = _empty(dtype, trailing, rows), np.zeros(rows, bool)
            cols[f"system.{block}.{col}"] = pa.LargeListArray.from_arrays(
                pa.array(np.asarray(b["offsets"], np.int64)), _arrow_values(values, valid), mask=pa.array(absent)
            )
    unplanned = set(s["blocks"]) - set(layout.system)
    if unplanned:
        raise ValueError(
            f"system blocks {sorted(unplanned)} are not in the set's first records' systems: the record "
            f"layout is fixed from those (read with unit='frame', or read these records with mrec.open)"
        )
    return pa.table(cols)


def _cell_json(c: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    if c is None:
        return None
    return {
        "vectors": np.asarray(c["vectors"], float).tolist(),
        "origin": np.asarray(c["origin"], float).tolist(),
        "boundary": [bool(b) for b in c["boundary"]],
        "defined": bool(c["defined"]),
    }


# -- records back ------------------------------------------------------------


def _numpy(arr: pa.Array, dtype: str) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Rows (``arr``: primitive, or fixed-size lists of them) as
    ``(values (rows, *trailing), valid or None)``; a null row's values are
    zeros (or empty strings)."""
    rows = len(arr)
    valid = None
    if arr.null_count:
        valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    trailing: List[int] = []
    inner = arr
    while pa.types.is_fixed_size_list(inner.type):
        size = inner.type.list_size
        trailing.append(size)
        # `.values` is the whole child, null slots included, past any offset.
        inner = inner.values.slice(inner.offset * size, len(inner) * size)
    if DTYPES[dtype] is object:
        flat = np.array(["" if v is None else v for v in inner.to_pylist()], dtype=object)
    else:
        filled = inner.fill_null(0) if inner.null_count else inner
        flat = np.asarray(filled.to_numpy(zero_copy_only=False))
    if dtype in ("c64", "c128"):
        pairs = flat.reshape(-1, 2)
        flat = (pairs[:, 0] + 1j * pairs[:, 1]).astype(DTYPES[dtype])
        trailing = trailing[:-1]
    else:
        flat = flat.astype(DTYPES[dtype], copy=False)
    return flat.reshape([rows] + trailing), valid


class _Lists:
    """A list column as NumPy: each row's range of the child's rows
    (``offsets``, absolute in the child, whatever slice the array is), and
    the child converted once."""

    def __init__(self, a: pa.Array, dtype: Optional[str] = None, nested: Optional[str] = None) -> None:
        self.offsets = np.asarray(a.offsets, np.int64)
        child = a.values
        self.inner: Optional[_Lists] = None
        if nested is not None:  # rows of frames: a list of lists
            self.inner = _Lists(child, nested)
            return
        if dtype is None:
            self.values: Any = child.to_numpy(zero_copy_only=False)
            self.valid = None if not child.null_count else ~np.asarray(child.is_null().to_numpy(zero_copy_only=False), bool)
        elif dtype == "json":
            self.values = [None if v is None else json.loads(v) for v in child.to_pylist()]
            self.valid = None
        else:
            self.values, self.valid = _numpy(child, dtype)

    def span(self, i: int) -> Tuple[int, int]:
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def rows(self, lo: int, hi: int) -> Tuple[Any, Optional[np.ndarray]]:
        """Child rows ``lo:hi`` (of a nested column: the rows of frames
        ``lo:hi``) and their validity (None: all valid)."""
        if self.inner is not None:
            a, b = int(self.inner.offsets[lo]), int(self.inner.offsets[hi])
            return self.inner.rows(a, b)
        valid = None if self.valid is None else self.valid[lo:hi]
        return self.values[lo:hi], (None if valid is None or valid.all() else valid)


def _columns_of(per_col: Mapping[str, _Lists], i: int) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """Row `i`'s part of each column of a block, and the validity of the
    nullable ones."""
    columns: Dict[str, Any] = {}
    validity: Dict[str, np.ndarray] = {}
    for name, lists in per_col.items():
        values, valid = lists.rows(*lists.span(i))
        columns[name] = values
        if valid is not None:
            validity[name] = valid
    return columns, validity


def records_from_table(table: pa.Table, layout: RecordLayout) -> Iterator[Dict[str, Any]]:
    """The records of record rows, in the shape ``Writer.append`` takes."""
    table = table.combine_chunks()

    def column(name: str) -> pa.Array:
        c = table.column(name)
        return c.chunk(0) if c.num_chunks else pa.array([], c.type)

    n = table.num_rows
    metas = column("meta").to_pylist()
    systems = column("system").to_pylist()
    has_traj = column("has_trajectory").to_numpy(zero_copy_only=False)
    step = _Lists(column("step"))
    time = _Lists(column("time"))
    step_meta = {key: _Lists(column(f"meta.{key}"), "json" if tag == "json" else tag) for key, tag in layout.step_keys}
    blocks = {
        block: (
            _Lists(column(f"{block}.present")),
            _Lists(column(f"{block}.count")),
            {name: _Lists(column(f"{block}.{name}"), nested=dtype) for name, dtype, _ in columns},
        )
        for block, columns in layout.blocks.items()
    }
    cell_present = _Lists(column("cell.present"))
    cells = {
        "vectors": _Lists(column("cell.vectors"), "f64"),
        "origin": _Lists(column("cell.origin"), "f64"),
        "boundary": _Lists(column("cell.boundary"), "bool"),
        "defined": _Lists(column("cell.defined")),
    }
    sys_blocks = {}
    for block, columns in layout.system.items():
        counts = column(f"system.{block}.count")
        there = ~np.asarray(counts.is_null().to_numpy(zero_copy_only=False), bool)
        sys_blocks[block] = (
            (there, counts.fill_null(0).to_numpy(zero_copy_only=False)),
            {name: _Lists(column(f"system.{block}.{name}"), dtype) for name, dtype, _ in columns},
        )
    for i in range(n):
        record: Dict[str, Any] = {"meta": json.loads(metas[i]), "system": None, "trajectory": None}
        if systems[i] is not None:
            doc = json.loads(systems[i])
            sblocks = {}
            for block, ((there, counts), per_col) in sys_blocks.items():
                if not there[i]:
                    continue
                columns, validity = _columns_of(per_col, i)
                sblocks[block] = {"columns": columns, "validity": validity, "count": int(counts[i])}
            record["system"] = {"meta": doc["meta"], "meta_types": doc["meta_types"], "blocks": sblocks, "cell": doc["cell"]}
        if has_traj[i]:
            tblocks = {}
            for block, (present_l, count_l, per_col) in blocks.items():
                present = present_l.rows(*present_l.span(i))[0]
                if not present.any():
                    continue
                count = np.asarray(count_l.rows(*count_l.span(i))[0], np.int64)
                columns, validity = _columns_of(per_col, i)
                tblocks[block] = {
                    "present": present,
                    "offsets": np.concatenate([[0], np.cumsum(count)]).astype(np.int64),
                    "count": count,
                    "columns": columns,
                    "validity": validity,
                }
            times, valid = time.rows(*time.span(i))
            trajectory: Dict[str, Any] = {
                "step": step.rows(*step.span(i))[0],
                "time": None if valid is not None and not valid.any() else times,
                "meta": {k: v.rows(*v.span(i))[0] for k, v in step_meta.items()},
                "blocks": tblocks,
                "cell": None,
            }
            present = cell_present.rows(*cell_present.span(i))[0]
            if present.any():
                cell = {k: v.rows(*v.span(i))[0] for k, v in cells.items()}
                cell["vectors"] = cell["vectors"].reshape(-1, 3, 3)
                cell["present"] = present
                trajectory["cell"] = cell
            record["trajectory"] = trajectory
        yield record


# -- structures ----------------------------------------------------------------


def structures_table(batch: Mapping[str, Any], kinds: Mapping[str, str], offsets: Mapping[str, int]) -> pa.Table:
    """A batch of :class:`mrec.Structures` as structure rows: an output of
    rows (``kinds``: its per-structure count, ``natoms`` for per-atom ones)
    as lists over each structure's rows, the rest one value per structure;
    ``offsets`` is added to the id columns it names (``index``, ``record``:
    their offsets in the set)."""
    cols: Dict[str, pa.Array] = {}
    starts: Dict[str, np.ndarray] = {}
    for key, value in batch.items():
        if key == "batch":  # the batch's own, not a structure's
            continue
        if key in offsets:
            value = np.asarray(value, np.int64) + offsets[key]
        count = kinds.get(key)
        if isinstance(value, list):
            cols[key] = pa.array([json.dumps(v, allow_nan=True) for v in value], pa.string())
        elif count is not None and count in batch:
            if count not in starts:
                starts[count] = np.concatenate([[0], np.cumsum(batch[count])]).astype(np.int64)
            cols[key] = _lists(starts[count], _arrow_values(np.asarray(value)))
        else:
            cols[key] = _arrow_values(np.asarray(value))
    return pa.table(cols)


_ARROW_DTYPES = {
    pa.float64(): "f64",
    pa.int8(): "i8",
    pa.int16(): "i16",
    pa.int32(): "i32",
    pa.int64(): "i64",
    pa.uint8(): "u8",
    pa.uint16(): "u16",
    pa.uint32(): "u32",
    pa.uint64(): "u64",
    pa.bool_(): "bool",
    pa.string(): "string",
    pa.large_string(): "string",
}


def _arrow_row_type(t: pa.DataType) -> Tuple[str, Tuple[int, ...]]:
    """The molrec dtype and trailing shape of an Arrow row type."""
    trailing: List[int] = []
    while pa.types.is_fixed_size_list(t):
        trailing.append(t.list_size)
        t = t.value_type
    if t not in _ARROW_DTYPES:
        raise TypeError(f"no molrec dtype for Arrow {t}")
    return _ARROW_DTYPES[t], tuple(trailing)


def layout_of_table(schema: pa.Schema, declared: Mapping[str, Any]) -> RecordLayout:
    """The layout of record rows from their Arrow schema and the
    declaration they are written with (``declared``: ``sequence_schema``)."""
    layout = RecordLayout()
    names = set(schema.names)
    for key, decl in sorted(declared.get("meta", {}).items()):
        if f"meta.{key}" in names:
            layout.step_keys.append((key, decl.get("dtype", "json")))
    for block, decl in sorted(declared.get("blocks", {}).items()):
        if f"{block}.present" not in names:
            continue
        cols = []
        for col in sorted(decl.get("columns", {})):
            if f"{block}.{col}" in names:
                row = schema.field(f"{block}.{col}").type.value_type.value_type
                cols.append((col, decl["columns"][col].get("dtype", "f64"), _arrow_row_type(row)[1]))
        layout.blocks[block] = cols
    for name in sorted(names):
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "system":
            columns = layout.system.setdefault(parts[1], [])
            if parts[2] != "count":
                dtype, trailing = _arrow_row_type(schema.field(name).type.value_type)
                columns.append((parts[2], dtype, trailing))
    return layout
