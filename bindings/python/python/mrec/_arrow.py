"""Records and structures as Arrow tables, and records back from them: the
blocks ``mrec.ray`` reads and writes (docs/shards.md, "Ray Data").

Columns, never Python objects per row: a batch's flat arrays and offsets
(what ``Collection.batch`` and ``Structures.batch`` gather in Rust) become
Arrow list arrays over the same values, one row per record or structure.

A record row (``unit="record"``): ``record`` (int64, its number in the
set), ``meta`` (its meta document as JSON text), ``has_trajectory``,
``n_frames``; per frame ``step``, ``time`` (null for a record without
times), each declared per-step key as ``meta.<key>`` (a ``json`` key as
JSON text, a vector tag as fixed-size lists); for each declared trajectory
block ``<block>.present``, ``<block>.count`` and each declared column
``<block>.<column>`` (frames -> rows; null for a record whose block lacks
the column; an invalid row is an Arrow null, a trailing shape a fixed-size
list, a complex value two floats); the cell in effect as ``cell.present``,
``cell.vectors`` (9 values, lattice vectors as columns, molrec's order),
``cell.origin``, ``cell.boundary``, ``cell.defined``; the system as
``system`` (JSON text of its ``meta``, ``meta_types``, ``cell`` and, per
block, what it says besides its rows: its columns' dtypes, precisions,
``structural_shape``, ``targets``, ``attributes``; null without a system)
and, for each system block and column the set's records have,
``system.<block>.count`` and ``system.<block>.<column>`` (rows; null where
the record's system lacks them).

Record -> row -> record gives the record back as ``mrec.open`` reads it,
values under invalid rows included (Arrow keeps them under its nulls;
some of Arrow's own kernels, e.g. ``take`` of strings, do not, and such a
value means nothing: docs/canonical-json.md).

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

#: Records sampled (spread over the set) to fix the record rows' system
#: columns.
SAMPLE = 64

Columns = List[Tuple[str, str, Tuple[int, ...]]]


def tag_values(tag: str) -> Tuple[str, Tuple[int, ...]]:
    """The dtype and per-frame trailing shape of a per-step tag's values
    (``f64x3``: f64, ``(3,)``; ``bool3``: bool, ``(3,)``)."""
    if tag == "bool3":
        return "bool", (3,)
    dtype, vector, width = tag.partition("x")
    return dtype, (int(width),) if vector else ()


@dataclass
class RecordLayout:
    """The columns of a set's record rows, fixed once for every read task
    (so that every block has one schema): the declared per-step keys and
    trajectory blocks, and the system columns found in its records."""

    #: (key, tag) of each declared per-step key.
    step_keys: List[Tuple[str, str]] = field(default_factory=list)
    #: declared trajectory block -> [(column, dtype, trailing shape)]
    blocks: Dict[str, Columns] = field(default_factory=dict)
    #: declared trajectory block -> its ``structural_shape`` and ``targets``
    #: (a block's are the declaration's, whatever its updates restate).
    heads: Dict[str, Tuple[Optional[List[int]], Dict[str, str]]] = field(default_factory=dict)
    #: system block -> [(column, dtype, trailing shape)]
    system: Dict[str, Columns] = field(default_factory=dict)

    @classmethod
    def declared(cls, schema: Mapping[str, Any]) -> "RecordLayout":
        """The trajectory part of the layout, from a ``sequence_schema``."""
        layout = cls()
        for key, decl in sorted(schema.get("meta", {}).items()):
            layout.step_keys.append((key, decl.get("dtype", "json")))
        for block, decl in sorted(schema.get("blocks", {}).items()):
            layout.blocks[block] = [
                (col, c.get("dtype", "f64"), tuple(int(x) for x in c.get("trailing", ())))
                for col, c in sorted(decl.get("columns", {}).items())
            ]
            shape = decl.get("structural_shape")
            layout.heads[block] = (list(shape) if shape is not None else None, dict(decl.get("targets", {})))
        return layout

    @classmethod
    def of(cls, c: Any) -> "RecordLayout":
        """The layout of a collection or set ``c``: its declaration, and the
        system columns of :data:`SAMPLE` records spread over it."""
        layout = cls.declared(c.schema)
        n = len(c)
        if n:
            sample = sorted(set(np.linspace(0, n - 1, min(SAMPLE, n)).astype(int).tolist()))
            for block, b in sorted(c.batch(sample)["system"]["blocks"].items()):
                layout.system[block] = [(col, _dtype_name(v), tuple(v.shape[1:])) for col, v in sorted(b["columns"].items())]
        return layout


def _dtype_name(a: np.ndarray) -> str:
    for name, dt in DTYPES.items():
        if dt is object and a.dtype == object:
            return name
        if dt is not object and a.dtype == np.dtype(dt):
            return name
    raise TypeError(f"no molrec dtype for {a.dtype}")


def _row_type(dtype: str, trailing: Tuple[int, ...]) -> pa.DataType:
    """The Arrow type of a row of ``dtype`` and ``trailing`` shape (what
    :func:`_arrow_values` makes)."""
    if dtype == "string":
        t: pa.DataType = pa.string()
    elif dtype in ("c64", "c128"):
        t = pa.list_(pa.float32() if dtype == "c64" else pa.float64(), 2)
    else:
        t = pa.from_numpy_dtype(DTYPES[dtype])
    for w in reversed(trailing):
        t = pa.list_(t, w)
    return t


def _arrow_values(a: np.ndarray, valid: Optional[np.ndarray] = None) -> pa.Array:
    """A flat array of rows ``(rows, *trailing)`` as Arrow: the trailing
    axes as fixed-size lists, a complex value as two floats, an invalid row
    (``valid`` false) as null over the value it holds."""
    trailing = tuple(a.shape[1:])
    if a.dtype == object:
        arr: pa.Array = pa.array([str(x) for x in a.reshape(-1)], pa.string())
    elif a.dtype.kind == "c":
        parts = np.float32 if a.dtype == np.complex64 else np.float64
        pairs = np.stack([a.real, a.imag], axis=-1).astype(parts)
        arr, trailing = pa.array(np.ascontiguousarray(pairs).reshape(-1)), trailing + (2,)
    else:
        arr = pa.array(np.ascontiguousarray(a).reshape(-1))
    for w in reversed(trailing):
        arr = pa.FixedSizeListArray.from_arrays(arr, w)
    if valid is None or np.all(valid):
        return arr
    valid = np.asarray(valid, bool)
    if trailing:
        return pa.FixedSizeListArray.from_arrays(arr.values, trailing[0], mask=pa.array(~valid))
    bitmap = pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap] + arr.buffers()[1:], null_count=int((~valid).sum()))


def _lists(offsets: np.ndarray, values: pa.Array, absent: Optional[np.ndarray] = None) -> pa.Array:
    """Lists of ``values`` (``offsets``), null where ``absent``."""
    mask = None if absent is None or not absent.any() else pa.array(absent)
    return pa.LargeListArray.from_arrays(pa.array(np.asarray(offsets, np.int64)), values, mask=mask)


class _Table(dict):  # type: ignore[type-arg]
    """A record row's columns by name; a name made twice (block, column or
    key names that meet once joined with dots) is refused, not overwritten."""

    def __setitem__(self, name: str, arr: pa.Array) -> None:
        if name in self:
            raise ValueError(f"record rows cannot hold this set: two of its parts make the column name {name!r}")
        super().__setitem__(name, arr)


def _per_record(frame_record: np.ndarray, flags: np.ndarray, n: int) -> np.ndarray:
    """Whether each of ``n`` records has a frame where ``flags`` is true."""
    return np.bincount(frame_record, weights=np.asarray(flags, np.float64), minlength=n)[:n] > 0


def records_table(batch: Mapping[str, Any], first_record: int, has_trajectory: np.ndarray, layout: RecordLayout) -> pa.Table:
    """A batch of records (``Collection.batch`` of one shard) as record
    rows; ``first_record`` is the shard's first record in the set."""
    n = len(batch["records"])
    cols = _Table()
    cols["record"] = pa.array(np.asarray(batch["records"], np.int64) + first_record)
    cols["meta"] = pa.array([json.dumps(m, allow_nan=True) for m in batch["meta"]], pa.string())
    cols["has_trajectory"] = pa.array(np.asarray(has_trajectory, bool))
    t = batch["trajectory"]
    toff = np.asarray(t["offsets"], np.int64)
    frames = int(toff[-1])
    frame_record = np.repeat(np.arange(n), np.diff(toff))
    cols["n_frames"] = pa.array(np.diff(toff))
    cols["step"] = _lists(toff, pa.array(np.asarray(t["step"], np.int64)))
    time = t["time"] if t["time"] is not None else np.full(frames, np.nan)
    cols["time"] = _lists(toff, pa.array(np.asarray(time, np.float64)), ~np.asarray(t["timed"], bool))
    for key, tag in layout.step_keys:
        values = t["meta"].get(key)
        if tag == "json" or isinstance(values, list):
            arr = pa.array([json.dumps(v, allow_nan=True) for v in values or []], pa.string())
        elif values is None:  # no frame in the batch
            arr = pa.array([], _row_type(*tag_values(tag)))
        else:
            arr = _arrow_values(np.asarray(values))
        cols[f"meta.{key}"] = _lists(toff, arr)
    for block, columns in layout.blocks.items():
        b = t["blocks"].get(block)
        if b is None:
            b = {"present": np.zeros(frames, bool), "count": np.zeros(frames, np.int64),
                 "offsets": np.zeros(frames + 1, np.int64), "columns": {}, "validity": {}, "lacks": {}}
        present = np.asarray(b["present"], bool)
        no_block = ~_per_record(frame_record, present, n)
        cols[f"{block}.present"] = _lists(toff, pa.array(present))
        cols[f"{block}.count"] = _lists(toff, pa.array(np.asarray(b["count"], np.int64)))
        for col, dtype, trailing in columns:
            values = b["columns"].get(col)
            if values is None:
                cols[f"{block}.{col}"] = pa.nulls(n, pa.large_list(pa.large_list(_row_type(dtype, trailing))))
                continue
            lacks = b["lacks"].get(col)
            absent = no_block if lacks is None else no_block | _per_record(frame_record, lacks, n)
            rows = _lists(b["offsets"], _arrow_values(values, b["validity"].get(col)))
            cols[f"{block}.{col}"] = _lists(toff, rows, absent)
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
    _system_columns(batch["system"], n, layout, cols)
    return pa.table(dict(cols))


def _system_columns(s: Mapping[str, Any], n: int, layout: RecordLayout, cols: _Table) -> None:
    """The ``system`` column and the system blocks' columns of a batch's
    ``n`` records' systems ``s``."""
    unplanned = set(s["blocks"]) - set(layout.system)
    if unplanned:
        raise ValueError(
            f"system blocks {sorted(unplanned)} are not in the set's first records' systems: the record "
            f"layout is fixed from those (read with unit='frame', or read these records with mrec.open)"
        )
    present = np.asarray(s["present"], bool).tolist()
    # Each record's blocks as JSON text, made once per distinct text (most
    # records' systems have the same blocks, columns and no header).
    heads: List[List[str]] = [[] for _ in range(n)]
    for block, columns in layout.system.items():
        b = s["blocks"].get(block)
        if b is None:
            b = {"present": np.zeros(n, bool), "count": np.zeros(n, np.int64), "offsets": np.zeros(n + 1, np.int64),
                 "columns": {}, "validity": {}, "lacks": {}, "differs": {}, "headers": [None] * n}
        for col, at in b["differs"].items():
            raise ValueError(
                f"system column `{block}.{col}` has another dtype or row shape in record "
                f"{int(np.argmax(at))} of the batch than in an earlier one: record rows hold one per column "
                f"(read these records with mrec.open)"
            )
        planned = {c: (dtype, trailing) for c, dtype, trailing in columns}
        dtypes = {c: _dtype_name(v) for c, v in sorted(b["columns"].items())}
        for col, values in b["columns"].items():
            if planned.get(col) != (dtypes[col], tuple(values.shape[1:])):
                raise ValueError(
                    f"system column `{block}.{col}` ({dtypes[col]}, rows {tuple(values.shape[1:])}) is not as in the "
                    f"set's first records' systems ({planned.get(col, 'not there')}): the record layout is fixed "
                    f"from those (read with unit='frame', or read these records with mrec.open)"
                )
        absent = ~np.asarray(b["present"], bool)
        lacks = {c: np.asarray(v, bool).tolist() for c, v in b["lacks"].items()}
        made: Dict[Tuple[str, ...], str] = {}
        name = json.dumps(block)
        for i, (there, header) in enumerate(zip((~absent).tolist(), b["headers"])):
            if not there or not present[i]:
                continue
            has = tuple(c for c in dtypes if c not in lacks or not lacks[c][i])
            if header is None:
                text = made.get(has)
                if text is None:
                    text = made[has] = json.dumps({"columns": {c: dtypes[c] for c in has}})
            else:
                head = {"columns": {c: dtypes[c] for c in has}, **{k: v for k, v in header.items() if v}}
                text = json.dumps(head, allow_nan=True)
            heads[i].append(f"{name}: {text}")
        cols[f"system.{block}.count"] = pa.array(np.asarray(b["count"], np.int64), mask=absent)
        for col, dtype, trailing in columns:
            values = b["columns"].get(col)
            if values is None:
                cols[f"system.{block}.{col}"] = pa.nulls(n, pa.large_list(_row_type(dtype, trailing)))
                continue
            lacking = b["lacks"].get(col)
            rows = _arrow_values(values, b["validity"].get(col))
            cols[f"system.{block}.{col}"] = _lists(b["offsets"], rows, absent if lacking is None else absent | lacking)
    cell = s["cell"]
    cell_present = [False] * n if cell is None else np.asarray(cell["present"], bool).tolist()
    docs: List[Optional[str]] = []
    for i in range(n):
        if not present[i]:
            docs.append(None)
            continue
        c = {k: cell[k][i] for k in ("vectors", "origin", "boundary", "defined")} if cell_present[i] else None
        doc = json.dumps({"meta": s["meta"][i], "meta_types": s["meta_types"][i], "cell": _cell_json(c)}, allow_nan=True)
        docs.append(f'{doc[:-1]}, "blocks": {{{", ".join(heads[i])}}}}}')
    cols["system"] = pa.array(docs, pa.string())


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


def _unmasked(arr: pa.Array) -> pa.Array:
    """A primitive or string array without its validity: the values under
    its nulls as they are."""
    if not arr.null_count:
        return arr
    return pa.Array.from_buffers(arr.type, len(arr), [None] + arr.buffers()[1:], offset=arr.offset)


def _numpy(arr: pa.Array, dtype: str) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Rows (``arr``: primitive, or fixed-size lists of them) as
    ``(values (rows, *trailing), valid or None)``; a null row's values are
    those under it."""
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
    inner = _unmasked(inner)
    if DTYPES[dtype] is object:
        flat = np.array(inner.to_pylist(), dtype=object)
    else:
        flat = np.asarray(inner.to_numpy(zero_copy_only=False))
    if dtype in ("c64", "c128"):
        # The two parts' bits as they are (-0.0, NaN): a view, not arithmetic.
        parts = np.float32 if dtype == "c64" else np.float64
        flat = np.ascontiguousarray(flat, dtype=parts).view(DTYPES[dtype])
        trailing = trailing[:-1]
    else:
        flat = flat.astype(DTYPES[dtype], copy=False)
    return flat.reshape([rows] + trailing), valid


class _Lists:
    """A list column as NumPy: each row's range of the child's rows
    (``offsets``, absolute in the child, whatever slice the array is),
    which rows are not null (``there``), and the child converted once."""

    def __init__(self, a: pa.Array, dtype: Optional[str] = None, nested: Optional[str] = None) -> None:
        self.offsets = np.asarray(a.offsets, np.int64)
        self.there = None if not a.null_count else ~np.asarray(a.is_null().to_numpy(zero_copy_only=False), bool)
        child = a.values
        self.inner: Optional[_Lists] = None
        if nested is not None:  # rows of frames: a list of lists
            self.inner = _Lists(child, nested)
            return
        if dtype is None:
            self.values: Any = child.to_numpy(zero_copy_only=False)
            self.valid = None
        elif dtype == "json":
            self.values = [json.loads(v) for v in child.to_pylist()]
            self.valid = None
        else:
            self.values, self.valid = _numpy(child, dtype)

    def has(self, i: int) -> bool:
        """Whether row ``i`` is not null."""
        return self.there is None or bool(self.there[i])

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

    def of(self, i: int) -> Tuple[Any, Optional[np.ndarray]]:
        """Row ``i``'s rows and their validity."""
        return self.rows(*self.span(i))


def _columns_of(per_col: Mapping[str, _Lists], i: int) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """The columns that row ``i`` of a block has (not null there), and the
    validity of those with an invalid row."""
    columns: Dict[str, Any] = {}
    validity: Dict[str, np.ndarray] = {}
    for name, lists in per_col.items():
        if not lists.has(i):
            continue
        values, valid = lists.of(i)
        columns[name] = values
        if valid is not None:
            validity[name] = valid
    return columns, validity


def _systems_back(table: pa.Table, column: Any) -> Iterator[Optional[Dict[str, Any]]]:
    """The systems of record rows, in the shape ``Writer.append`` takes."""
    docs = [None if d is None else json.loads(d) for d in column("system").to_pylist()]
    dtypes: Dict[Tuple[str, str], str] = {}
    for doc in docs:
        for block, head in (doc or {"blocks": {}})["blocks"].items():
            for col, dtype in head["columns"].items():
                if dtypes.setdefault((block, col), dtype) != dtype:
                    raise ValueError(f"system column `{block}.{col}` is {dtypes[block, col]} in one record, {dtype} in another")
    names = {block for doc in docs if doc is not None for block in doc["blocks"]}
    counts = {b: column(f"system.{b}.count").fill_null(0).to_numpy(zero_copy_only=False) for b in names}
    values = {(b, c): _Lists(column(f"system.{b}.{c}"), dtype) for (b, c), dtype in dtypes.items()}
    for i, doc in enumerate(docs):
        if doc is None:
            yield None
            continue
        blocks = {}
        for block, head in doc["blocks"].items():
            columns: Dict[str, Any] = {}
            validity: Dict[str, np.ndarray] = {}
            for col in head["columns"]:
                columns[col], valid = values[block, col].of(i)
                if valid is not None:
                    validity[col] = valid
            blocks[block] = {
                "count": int(counts[block][i]),
                "columns": columns,
                "validity": validity,
                "precision": dict(head.get("precision", {})),
                "structural_shape": head.get("structural_shape"),
                "targets": dict(head.get("targets", {})),
                "attributes": dict(head.get("attributes", {})),
            }
        yield {"meta": doc["meta"], "meta_types": doc["meta_types"], "blocks": blocks, "cell": _cell_back(doc["cell"])}


def _cell_back(c: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    if c is None:
        return None
    return {
        "vectors": np.asarray(c["vectors"], np.float64).reshape(3, 3),
        "origin": np.asarray(c["origin"], np.float64),
        "boundary": np.asarray(c["boundary"], bool),
        "defined": bool(c["defined"]),
    }


def records_from_table(table: pa.Table, layout: RecordLayout) -> Iterator[Dict[str, Any]]:
    """The records of record rows, in the shape ``mrec.open`` reads them
    (and ``Writer.append`` takes)."""
    table = table.combine_chunks()

    def column(name: str) -> pa.Array:
        if name not in table.column_names:
            raise ValueError(f"record rows without the column {name!r}")
        c = table.column(name)
        return c.chunk(0) if c.num_chunks else pa.array([], c.type)

    n = table.num_rows
    metas = column("meta").to_pylist()
    systems = _systems_back(table, column)
    has_traj = column("has_trajectory").to_numpy(zero_copy_only=False)
    step = _Lists(column("step"))
    time = _Lists(column("time"), "f64")
    step_meta = {key: _Lists(column(f"meta.{key}"), "json" if tag == "json" else tag_values(tag)[0]) for key, tag in layout.step_keys}
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
    for i in range(n):
        record: Dict[str, Any] = {"meta": json.loads(metas[i]), "system": next(systems), "trajectory": None}
        if has_traj[i]:
            tblocks = {}
            for block, (present_l, count_l, per_col) in blocks.items():
                present = np.asarray(present_l.of(i)[0], bool)
                if not present.any():
                    continue
                count = np.asarray(count_l.of(i)[0], np.int64)
                columns, validity = _columns_of(per_col, i)
                shape, targets = layout.heads.get(block, (None, {}))
                tblocks[block] = {
                    "present": present,
                    "count": count,
                    "offsets": np.concatenate([[0], np.cumsum(count)]).astype(np.int64),
                    "columns": columns,
                    "validity": validity,
                    "structural_shape": shape,
                    "targets": dict(targets),
                }
            steps = np.asarray(step.of(i)[0], np.int64)
            trajectory: Dict[str, Any] = {
                "n_frames": len(steps),
                "step": steps,
                "time": time.of(i)[0] if time.has(i) else None,
                "meta": {k: v.of(i)[0] for k, v in step_meta.items()},
                "meta_types": dict(layout.step_keys),
                "blocks": tblocks,
                "cell": None,
            }
            present = np.asarray(cell_present.of(i)[0], bool)
            if present.any():
                cell = {k: v.of(i)[0] for k, v in cells.items()}
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


def layout_of_table(schema: pa.Schema, declared: Mapping[str, Any]) -> RecordLayout:
    """The layout of record rows from their Arrow schema and the
    declaration they are written with (``declared``: ``sequence_schema``):
    the declared keys, blocks and columns the rows hold. (Their systems'
    blocks and columns are in each row's ``system``.)"""
    full = RecordLayout.declared(declared)
    names = set(schema.names)
    layout = RecordLayout(heads=full.heads)
    layout.step_keys = [(key, tag) for key, tag in full.step_keys if f"meta.{key}" in names]
    for block, columns in full.blocks.items():
        if f"{block}.present" in names:
            layout.blocks[block] = [c for c in columns if f"{block}.{c[0]}" in names]
    return layout
