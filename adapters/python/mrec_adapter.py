#!/usr/bin/env python3
"""Template molrec adapter: writes and reads `.mrec.lmdb` collections for
the harness.

Speaks the harness's subprocess protocol (version 1, docs/adapters.md):
one JSON object per line on stdin/stdout, diagnostics on stderr only.
- `read` answers with the collection in canonical JSON (resolved form,
  docs/canonical-json.md);
- `write` takes a collection in canonical JSON (presentation form) and
  writes it as a new file: the binding's keys, frame bytes, the index, the
  force field, `r`/`s` values, and `meta` last, in its own transaction.

It is a starting point, not a conforming implementation: the reader checks
only the few things that name a clause below, and the writer checks
nothing (it writes some collections it should refuse). It prefers clarity
to speed. Copy it and grow it.
"""
import json
import math
import os
import struct
import sys
import traceback

import lmdb
import numpy as np

NAME, VERSION = "mrec-python-template", "0.1.0"

# Column dtype -> numpy dtype (little-endian). bool is one byte 0/1;
# c64/c128 are interleaved (re, im) pairs, which numpy's complex types are.
NUMPY = {
    "f64": "<f8", "i8": "i1", "i16": "<i2", "i32": "<i4", "i64": "<i8",
    "u8": "u1", "u16": "<u2", "u32": "<u4", "u64": "<u8",
    "bool": "u1", "c64": "<c8", "c128": "<c16",
}
# Columns of the index that belong to the binding, not to the collection.
RESERVED_INDEX = ("first_frame", "n_frames", "n_atoms", "has_trajectory")


class Refusal(Exception):
    """The file breaks a rule; `clause` is its id in spec-map.toml."""

    def __init__(self, clause, message):
        super().__init__(message)
        self.clause = clause


def key(prefix, n):
    """A record or frame key: one prefix byte, then n as u64 big-endian."""
    return prefix + struct.pack(">Q", n)


def no_constants(name):
    raise ValueError(f"{name} is not JSON")  # JSON has no NaN/Infinity literals


def parse_json(data):
    return json.loads(data.decode("utf-8"), parse_constant=no_constants)


# ---------------------------------------------------------------- typed JSON

def f64_json(x):
    """An f64 as typed JSON: a number when finite, else a string."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def int_json(n):
    """An integer as typed JSON: a number up to 2^53, a decimal string beyond."""
    return n if abs(n) <= 2**53 else str(n)


def values_json(array, dtype):
    """A numpy array as the flat list of typed JSON values of a column."""
    flat = array.reshape(-1).tolist()  # Python floats, ints, complexes
    if dtype == "f64":
        return [f64_json(x) for x in flat]
    if dtype == "bool":
        return [bool(x) for x in flat]
    if dtype in ("c64", "c128"):
        return [[f64_json(z.real), f64_json(z.imag)] for z in flat]
    return [int_json(n) for n in flat]


# --------------------------------------------------------------- frame bytes

def decode_frame(value):
    """Frame bytes -> (header dict, payload bytes). Checks what names a clause."""
    if len(value) < 8:
        raise Refusal("mrf1.too-short", f"frame value of {len(value)} bytes")
    if value[:4] != b"MRF1":
        raise Refusal("mrf1.magic", f"frame magic {value[:4]!r}, expected b'MRF1'")
    (header_len,) = struct.unpack_from("<I", value, 4)
    if 8 + header_len > len(value):
        raise Refusal("mrf1.header-bounds", "frame header runs past the value")
    try:
        header = parse_json(value[8:8 + header_len])
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError included
        raise Refusal("mrf1.header-json", f"frame header: {e}") from e
    payload_start = (8 + header_len + 7) // 8 * 8  # zero padding up to 8
    return header, value[payload_start:]


def buffer(payload, offset, dtype, count):
    """A numpy view of `count` items of `dtype` at `offset` in the payload."""
    itemsize = np.dtype(dtype).itemsize
    if offset % 8:
        raise Refusal("mrf1.offset-aligned", f"offset {offset} is not a multiple of 8")
    if count * itemsize >= 2**64 or offset + count * itemsize >= 2**64:
        raise Refusal("mrf1.size-overflow", "buffer size overflows 64 bits")
    if offset < 0 or offset + count * itemsize > len(payload):
        raise Refusal("mrf1.buffer-bounds", f"buffer at {offset} runs past the value")
    return np.frombuffer(payload, dtype=dtype, count=count, offset=offset)


def decode_column(entry, payload):
    """A header column entry -> a canonical JSON column."""
    dtype, shape = entry["dtype"], [int(n) for n in entry["shape"]]
    count = int(np.prod(shape, dtype=object))  # exact, no overflow
    if dtype == "string":
        values = list(entry["values"])
    elif dtype in NUMPY:
        values = values_json(buffer(payload, entry["offset"], NUMPY[dtype], count), dtype)
    else:
        raise Refusal("mrf1.dtype", f"dtype {dtype!r} is outside the closed set")
    column = {"dtype": dtype, "shape": shape, "values": values}
    if "validity" in entry:
        mask = buffer(payload, entry["validity"], "u1", shape[0])
        if not mask.all():  # an all-true (or empty) mask is "no mask"
            column["validity"] = [bool(b) for b in mask.tolist()]
    if "precision" in entry:
        column["precision"] = entry["precision"]
    return column


def decode_blocks(header, payload):
    blocks = {}
    for name, entry in header.get("blocks", {}).items():
        block = {"count": entry["count"], "columns": {
            col: decode_column(e, payload) for col, e in entry["columns"].items()}}
        if entry.get("structural_shape") is not None:
            block["structural_shape"] = entry["structural_shape"]
        for extra in ("targets", "attributes"):
            if extra in entry:
                block[extra] = entry[extra]
        blocks[name] = block
    return blocks


def decode_box(box):
    """The stored cell with its defaults spelled out."""
    defined = box.get("cell_defined", True)
    # An omitted boundary is all-periodic, except on an undefined cell,
    # which is periodic on no axis (frame.md, "An undefined cell").
    out = {"vectors": box["vectors"], "origin": box.get("origin", [0.0, 0.0, 0.0]),
           "boundary": box.get("boundary", [defined] * 3),
           "cell_defined": defined}
    if not out["cell_defined"]:  # an undefined cell reads back as identity
        out["vectors"] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    return out


def system_frame(value):
    header, payload = decode_frame(value)
    frame = {"meta": header.get("meta", {}), "meta_types": header.get("meta_types", {}),
             "blocks": decode_blocks(header, payload)}
    if header.get("box") is not None:
        frame["box"] = decode_box(header["box"])
    return frame


def trajectory(txn, first, count):
    """Resolve frames first..first+count by carry-forward (within the record)."""
    blocks, box, frames = {}, None, []
    for j in range(first, first + count):
        value = txn.get(key(b"f", j))
        if value is None:
            raise Refusal("lmdb.frame.missing", f"no frame key for ordinal {j}")
        header, payload = decode_frame(value)
        blocks.update(decode_blocks(header, payload))  # a 0-row update empties
        # `"time": null` and `"box": null` (lmdb.md's v1 header example)
        # mean none (spec-map: mrf1.null-time-box).
        if header.get("box") is not None:
            box = decode_box(header["box"])
        frame = {"step": header["step"]}
        if header.get("time") is not None:
            frame["time"] = header["time"]
        frame["meta"] = header.get("meta", {})
        frame["blocks"] = dict(blocks)  # every block present or empty here
        if box is not None:
            frame["box"] = box
        frames.append(frame)
    return {"frames": frames}


# ---------------------------------------------------------------- collection

def read_collection(path):
    # lock=False: no reader-lock table, so reading needs no write access to
    # the directory and leaves no `-lock` file behind. That is only safe
    # because nobody writes the file while the harness reads it; a real
    # reader beside live writers keeps the lock (the spec says readers take it).
    env = lmdb.open(path, subdir=False, readonly=True, lock=False)
    try:
        with env.begin() as txn:  # txn.get returns copies: safe past the txn
            return collection(txn)
    finally:
        env.close()


def collection(txn):
    raw = txn.get(b"meta")
    if raw is None:
        raise Refusal("lmdb.meta.required", "no `meta` key: not a collection")
    try:
        meta = parse_json(raw)
    except ValueError as e:
        raise Refusal("lmdb.meta.well-formed", f"`meta` is not JSON: {e}") from e
    if not isinstance(meta, dict):
        raise Refusal("lmdb.meta.well-formed", "`meta` is not a JSON object")
    if meta.get("layout") != "mrec-lmdb":
        raise Refusal("lmdb.meta.layout", f"layout {meta.get('layout')!r}, expected 'mrec-lmdb'")
    version = meta.get("layout_version")
    if type(version) is not int or version != 1:  # not 1.0, "1", true or null
        raise Refusal("lmdb.meta.layout-version", f"layout_version {version!r} is not 1")

    header, payload = decode_frame(txn.get(b"index"))
    records_block = decode_blocks(header, payload)["records"]
    columns = records_block["columns"]
    first = [int(v) for v in columns["first_frame"]["values"]]
    n_frames = [int(v) for v in columns["n_frames"]["values"]]
    has_traj = columns["has_trajectory"]["values"]

    out = {"meta": meta["collection"], "sequence_schema": meta["sequence_schema"],
           "index": {k: v for k, v in columns.items() if k not in RESERVED_INDEX}}
    ff = txn.get(b"ff")
    if ff is not None:
        header, payload = decode_frame(ff)
        out["forcefield"] = {"meta": header.get("meta", {}),
                             "blocks": decode_blocks(header, payload)}
    records = []
    for r in range(int(meta["n_records"])):
        raw = txn.get(key(b"r", r))
        record = {"meta": {} if raw is None else parse_json(raw)}
        system = txn.get(key(b"s", r))
        if system is not None:
            record["system"] = system_frame(system)
        if has_traj[r]:
            record["trajectory"] = trajectory(txn, first[r], n_frames[r])
        records.append(record)
    out["records"] = records
    return out


# ================================================================== writing
#
# The writer is the reader above run backwards: canonical JSON in
# presentation form (docs/canonical-json.md) in, frame bytes and JSON values
# out, under the binding's keys. Like the reader it is a template: it checks
# nothing it does not need to encode (a collection it should refuse may be
# written anyway), and it keeps the whole file in memory before writing it.

# --------------------------------------------------------- typed JSON, read

def f64_from_json(v):
    """A typed f64 -> float: a number, or "NaN", "Infinity", "-Infinity"."""
    if isinstance(v, str):
        return {"NaN": float("nan"), "Infinity": float("inf"),
                "-Infinity": float("-inf")}[v]
    return float(v)


def int_from_json(v):
    """A typed integer -> int: a JSON integer or a decimal string."""
    return int(v)


# Meta tag -> (kind of each item, vector width or None); DIGEST §7.
TAGS = {
    "bool": ("bool", None), "i32": ("int", None), "i64": ("int", None),
    "u32": ("int", None), "u64": ("int", None), "f64": ("f64", None),
    "string": ("string", None), "json": ("json", None),
    "bool3": ("bool", 3), "i32x3": ("int", 3), "i64x3": ("int", 3),
    "u32x3": ("int", 3), "u64x3": ("int", 3),
    "f64x3": ("f64", 3), "f64x6": ("f64", 6), "f64x9": ("f64", 9),
}


def typed_json(tag, value):
    """A meta value in the canonical typed JSON of its tag (1 -> 1.0 for f64,
    2^60 -> "1152921504606846976" for an integer tag, ...)."""
    kind, width = TAGS[tag]

    def one(v):
        if kind == "f64":
            return f64_json(f64_from_json(v))
        if kind == "int":
            return int_json(int_from_json(v))
        return v  # bool, string and json are stored as they are

    return [one(v) for v in value] if width else one(value)


def infer_tag(value):
    """The tag an untagged system meta value gets (DIGEST §7): the tag it
    would read back as."""
    if isinstance(value, bool):  # before int: bool is an int in Python
        return "bool"
    if isinstance(value, int):
        if -2**63 <= value < 2**63:
            return "i64"
        return "u64" if 2**63 <= value < 2**64 else "f64"
    if isinstance(value, float):
        return "f64"
    if isinstance(value, str):
        return "string"
    return "json"  # list, dict, None


CANONICAL_F64_STEP_KEYS = ("pe", "ke", "etotal", "temp", "press", "volume")


def infer_step_tag(key, value):
    """The tag of an undeclared per-step value: as `infer_tag`, except that
    the special-float strings and the canonical per-step keys are f64 (the
    reference's reading, validate/declaration.rs)."""
    if value in ("NaN", "Infinity", "-Infinity"):
        return "f64"
    if key in CANONICAL_F64_STEP_KEYS and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return "f64"
    return infer_tag(value)


# ---------------------------------------------------------------- precision

def quantum(p):
    """The largest power of two not above precision p (DIGEST §6)."""
    _, exponent = math.frexp(p)  # p = m * 2**exponent with 0.5 <= m < 1
    return math.ldexp(1.0, exponent - 1)


def round_to_precision(values, p):
    """A writer stores roundTiesToEven(x / q) * q for finite |x| < 2^52 q,
    and x itself for NaN, infinities and larger values. np.rint rounds ties
    to even and keeps the sign of a value that rounds to zero (-0.0)."""
    q = quantum(p)
    # Rounding NaN, infinities or huge values may warn; np.where keeps
    # those values as they are anyway.
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = np.rint(values / q) * q
        keep = ~np.isfinite(values) | (np.abs(values) >= q * 2.0**52)
    return np.where(keep, values, rounded)


# ------------------------------------------------------------- columns in

class Column:
    """One column ready to encode: numpy `data` (or a list for strings),
    its `mask` (one byte a row, or None for "every row valid") and the
    declared `precision` to write in a system or index header."""

    def __init__(self, dtype, shape, data, mask, precision):
        self.dtype, self.shape, self.data = dtype, shape, data
        self.mask, self.precision = mask, precision

    def fingerprint(self):
        """Everything the file would hold for this column, as comparable
        bytes: equal fingerprints are the same bits (a repeated NaN is
        unchanged, -0.0 after 0.0 is a change)."""
        data = tuple(self.data) if self.dtype == "string" else self.data.tobytes()
        mask = None if self.mask is None else self.mask.tobytes()
        return (self.dtype, tuple(self.shape), data, mask, self.precision)


def column_in(column, precision=None):
    """A canonical JSON column -> Column, rounded to `precision` (the
    declaration's, for a trajectory column) or to the column's own."""
    dtype, shape = column["dtype"], [int(n) for n in column["shape"]]
    values = column["values"]
    if dtype == "string":
        data = list(values)
    elif dtype == "f64":
        data = np.array([f64_from_json(v) for v in values], dtype="<f8")
    elif dtype in ("c64", "c128"):
        data = np.array([complex(f64_from_json(re), f64_from_json(im))
                         for re, im in values], dtype=NUMPY[dtype])
    elif dtype == "bool":
        data = np.array([bool(v) for v in values], dtype="u1")
    else:  # the integer dtypes; big ones arrive as decimal strings
        data = np.array([int_from_json(v) for v in values], dtype=NUMPY[dtype])
    if dtype != "string":
        data = data.reshape(shape)  # C order: the buffer is row-major
    own = column.get("precision")  # a system or index column declares its own
    own = None if own is None else f64_from_json(own)
    if precision is None:
        precision = own
    if precision is not None and dtype == "f64":
        data = round_to_precision(data, precision)  # values arrive unrounded
    # No mask, an all-true mask and an empty mask are one value: no mask.
    validity = column.get("validity")
    mask = None
    if validity is not None and not all(validity):
        mask = np.array([bool(b) for b in validity], dtype="u1")
    return Column(dtype, shape, data, mask, own)


class Block:
    """One block ready to encode, with the header fields beside its columns."""

    def __init__(self, count, columns, structural_shape=None, targets=None,
                 attributes=None):
        self.count, self.columns = count, columns
        self.structural_shape = structural_shape
        self.targets = targets or {}
        self.attributes = attributes or {}

    def fingerprint(self):
        """What the file would hold for this block (see Column.fingerprint)."""
        columns = tuple((name, self.columns[name].fingerprint())
                        for name in sorted(self.columns))
        return (self.count, json.dumps(self.structural_shape),
                json.dumps(self.targets, sort_keys=True),
                json.dumps(self.attributes, sort_keys=True), columns)


def block_in(block):
    """A canonical JSON block (system, index or force field) -> Block; each
    column keeps and applies its own precision."""
    columns = {name: column_in(col) for name, col in block["columns"].items()}
    return Block(int(block["count"]), columns, block.get("structural_shape"),
                 block.get("targets"), block.get("attributes"))


def update_in(name, block, schema):
    """A presented trajectory block -> Block, as the file stores an update:
    precision from the declaration (applied, never written), and the
    declaration's `targets` and `structural_shape` stated in every header
    (the shape only when the update has rows: a shape's product is never 0)."""
    decl = schema["blocks"].get(name, {})
    declared = decl.get("columns", {})
    columns = {}
    for col, column in block["columns"].items():
        p = declared.get(col, {}).get("precision")
        columns[col] = column_in(column, None if p is None else f64_from_json(p))
        columns[col].precision = None  # a trajectory column carries none
    count = int(block["count"])
    shape = decl.get("structural_shape") if count > 0 else None
    return Block(count, columns, shape, decl.get("targets"), block.get("attributes"))


# --------------------------------------------------------- frame bytes out

def box_out(box):
    """A canonical JSON box -> the header's `box`, every field written. An
    undefined cell is stored with identity vectors and an all-false boundary
    (box.undefined-cell); its origin keeps its meaning."""
    defined = box.get("cell_defined", True)
    if defined:
        vectors = [[f64_from_json(x) for x in row] for row in box["vectors"]]
        boundary = [bool(b) for b in box.get("boundary", [True] * 3)]
    else:
        vectors = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        boundary = [False] * 3
    origin = [f64_from_json(x) for x in box.get("origin", [0.0, 0.0, 0.0])]
    return {"vectors": [[f64_json(x) for x in row] for row in vectors],
            "origin": [f64_json(x) for x in origin],
            "boundary": boundary, "cell_defined": bool(defined)}


def box_bits(header_box):
    """A stored box as comparable bits: a cell is written again only where
    it changes bit for bit."""
    numbers = [f64_from_json(x) for row in header_box["vectors"] for x in row]
    numbers += [f64_from_json(x) for x in header_box["origin"]]
    return (struct.pack("<12d", *numbers), tuple(header_box["boundary"]),
            header_box["cell_defined"])


def encode_frame(blocks, rest, with_precision):
    """Blocks + the rest of the header -> frame bytes (the inverse of
    `decode_frame`): "MRF1", u32 LE header length, the JSON header, zero
    padding to 8, then the payload. Every buffer (a column's values, then
    its mask) starts at an 8-aligned offset into the payload.

    `with_precision`: write each column's `precision` (system and index
    frames); trajectory updates and the force field carry none."""
    payload = bytearray()

    def place(raw):
        offset = len(payload)
        payload.extend(raw)
        payload.extend(bytes(-len(payload) % 8))  # the next buffer is aligned too
        return offset

    header_blocks = {}
    for name in sorted(blocks):  # sorted, as the reference writes them
        block = blocks[name]
        columns = {}
        for col in sorted(block.columns):
            c = block.columns[col]
            entry = {"dtype": c.dtype, "shape": c.shape}
            if c.dtype == "string":
                entry["values"] = c.data  # strings live in the header
            else:
                entry["offset"] = place(c.data.tobytes())  # '<' dtypes: little-endian
            if c.mask is not None:
                entry["validity"] = place(c.mask.tobytes())
            if with_precision and c.precision is not None:
                entry["precision"] = c.precision
            columns[col] = entry
        entry = {"count": block.count, "structural_shape": block.structural_shape,
                 "columns": columns}
        if block.targets:
            entry["targets"] = block.targets
        if block.attributes:
            entry["attributes"] = block.attributes
        header_blocks[name] = entry
    header = {"blocks": header_blocks, **rest}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")  # NaN must be typed by now
    value = bytearray(b"MRF1" + struct.pack("<I", len(text)) + text)
    value.extend(bytes(-len(value) % 8))  # padding counts from the value's start
    return bytes(value + payload)


def system_out(frame):
    """A system frame -> frame bytes: typed meta with a tag for every key
    (an untagged key gets the tag it would read back as), precision written
    and applied, the box when it has one."""
    meta, types = {}, dict(frame.get("meta_types", {}))
    for k, v in frame.get("meta", {}).items():
        types.setdefault(k, infer_tag(v))
        meta[k] = typed_json(types[k], v)
    rest = {"meta": meta, "meta_types": types}
    if "box" in frame:
        rest["box"] = box_out(frame["box"])
    blocks = {name: block_in(b) for name, b in frame.get("blocks", {}).items()}
    return encode_frame(blocks, rest, with_precision=True)


# ------------------------------------------------------------- declaration

def schema_out(schema):
    """A sequence_schema as `meta` stores it: `trailing` only when not
    empty, `nullable` only when true, fills in their tag's typed JSON."""
    blocks = {}
    for name, decl in schema.get("blocks", {}).items():
        columns = {}
        for col, cd in decl["columns"].items():
            out = {"dtype": cd["dtype"]}
            if cd.get("trailing"):
                out["trailing"] = [int(n) for n in cd["trailing"]]
            if cd.get("nullable"):
                out["nullable"] = True
            if cd.get("precision") is not None:
                out["precision"] = f64_json(f64_from_json(cd["precision"]))
            columns[col] = out
        entry = {"columns": columns}
        for key in ("structural_shape", "targets", "aligned_with"):
            if decl.get(key):
                entry[key] = decl[key]
        blocks[name] = entry
    meta = {}
    for key, decl in schema.get("meta", {}).items():
        meta[key] = {"dtype": decl["dtype"]}
        if "fill" in decl:  # `fill: null` is a fill (of a json key)
            meta[key]["fill"] = typed_json(decl["dtype"], decl["fill"])
    return {"blocks": blocks, "meta": meta}


def record_declaration(trajectory):
    """The declaration one record's trajectory presents: its own `schema`
    when it states one, else inferred from its frames. Returns (schema,
    whether it states a per-step meta declaration: a zero-frame record
    without a schema takes the collection's)."""
    if "schema" in trajectory:
        return schema_out(trajectory["schema"]), True
    blocks, meta = {}, {}
    for frame in trajectory["frames"]:
        for name, block in frame.get("blocks", {}).items():
            decl = blocks.setdefault(name, {"columns": {}})
            # The first update that states targets or a shape declares them.
            if block.get("targets") and "targets" not in decl:
                decl["targets"] = block["targets"]
            if block.get("structural_shape") and int(block["count"]) > 0 \
                    and "structural_shape" not in decl:
                decl["structural_shape"] = block["structural_shape"]
            for col, column in block["columns"].items():
                cd = decl["columns"].setdefault(col, {
                    "dtype": column["dtype"], "trailing": column["shape"][1:]})
                # A column is nullable when some row is null somewhere.
                if not all(column.get("validity", [])):
                    cd["nullable"] = True
        for key, value in frame.get("meta", {}).items():
            tag = infer_step_tag(key, value)
            if key not in meta:
                meta[key] = {"dtype": tag}
            elif meta[key]["dtype"] != tag and {meta[key]["dtype"], tag} <= {"i64", "u64", "f64"}:
                meta[key]["dtype"] = "f64"  # ints and reals of one key: one f64 key
    return schema_out({"blocks": blocks, "meta": meta}), bool(trajectory["frames"])


def effective_schema(collection):
    """The collection's declaration: the given `sequence_schema`, or the
    union of the records' declarations (blocks merged column by column,
    nullability OR-ed) with the per-step meta of the first record that
    states one (DIGEST §10)."""
    if collection.get("sequence_schema") is not None:
        return schema_out(collection["sequence_schema"])
    derived, meta = {"blocks": {}, "meta": {}}, None
    for record in collection["records"]:
        if "trajectory" not in record:
            continue
        schema, states_meta = record_declaration(record["trajectory"])
        if states_meta and meta is None:
            meta = schema["meta"]
        for name, decl in schema["blocks"].items():
            entry = derived["blocks"].setdefault(name, {**decl, "columns": {}})
            for col, cd in decl["columns"].items():
                have = entry["columns"].setdefault(col, dict(cd))
                if cd.get("nullable"):
                    have["nullable"] = True
    derived["meta"] = meta or {}
    return derived


# -------------------------------------------------------------- trajectory

def step_meta(frame, schema):
    """A frame's per-step meta as stored: every declared key, typed by its
    tag, a missing key's fill materialized."""
    given = frame.get("meta", {})
    meta = {}
    for key, decl in schema["meta"].items():
        if key in given:
            meta[key] = typed_json(decl["dtype"], given[key])
        elif "fill" in decl:
            meta[key] = decl["fill"]  # already typed by schema_out
    return meta


def trajectory_out(trajectory, schema):
    """A record's trajectory -> one frame value per ordinal.

    Carry-forward, as the reference writes it: the record starts with
    nothing carried (never across records), so its first frame writes every
    block it presents; after that a presented block is written only when it
    differs bit for bit from what carries forward, and the box only where
    the cell changes. A block the presentation omits is not written: it
    carries forward."""
    carried, cell = {}, None
    values = []
    # `time` is on every frame or on none: the first frame says which.
    has_time = bool(trajectory["frames"]) and "time" in trajectory["frames"][0]
    for frame in trajectory["frames"]:
        written = {}
        for name, presented in frame.get("blocks", {}).items():
            block = update_in(name, presented, schema)
            fingerprint = block.fingerprint()
            if carried.get(name) != fingerprint:
                written[name] = block
                carried[name] = fingerprint
        rest = {"meta": step_meta(frame, schema), "step": int_json(int_from_json(frame["step"]))}
        if has_time:
            rest["time"] = f64_json(f64_from_json(frame["time"]))
        if "box" in frame:
            box = box_out(frame["box"])
            if cell != box_bits(box):
                rest["box"] = box
                cell = box_bits(box)
        values.append(encode_frame(written, rest, with_precision=False))
    return values


# -------------------------------------------------------------- collection

def collection_values(collection):
    """The whole collection -> ({key: value} of every key but `meta`, the
    `meta` value)."""
    schema = effective_schema(collection)
    values = {}
    first_frame, n_frames, n_atoms, has_trajectory = [], [], [], []
    for r, record in enumerate(collection["records"]):
        if record.get("meta"):  # an absent `r` key reads as {}
            values[key(b"r", r)] = json.dumps(record["meta"], allow_nan=False).encode("utf-8")
        atoms = None
        if "system" in record:
            values[key(b"s", r)] = system_out(record["system"])
            system_atoms = record["system"].get("blocks", {}).get("atoms")
            if system_atoms is not None:  # its rows, even 0; else the trajectory's
                atoms = int(system_atoms.get("count", 0))
        first_frame.append(sum(n_frames))  # the exclusive prefix sum
        frames = []
        if "trajectory" in record:
            frames = trajectory_out(record["trajectory"], schema)
            if atoms is None:  # else rows of atoms where a frame first has it
                atoms = next((int(f["blocks"]["atoms"]["count"])
                              for f in record["trajectory"]["frames"]
                              if "atoms" in f.get("blocks", {})), None)
        for j, value in enumerate(frames):
            values[key(b"f", first_frame[-1] + j)] = value
        n_frames.append(len(frames))
        n_atoms.append(atoms or 0)
        has_trajectory.append("trajectory" in record)  # zero frames included

    # The index: the collection's own columns and the binding's four.
    n = len(collection["records"])
    columns = {name: column_in(c) for name, c in collection.get("index", {}).items()}
    for name, dtype, data in (("first_frame", "u64", first_frame),
                              ("n_frames", "u64", n_frames),
                              ("n_atoms", "u64", n_atoms),
                              ("has_trajectory", "bool", has_trajectory)):
        columns[name] = Column(dtype, [n], np.array(data, dtype=NUMPY[dtype]), None, None)
    values[b"index"] = encode_frame({"records": Block(n, columns)}, {"meta": {}},
                                    with_precision=True)

    if collection.get("forcefield") is not None:
        ff = collection["forcefield"]
        blocks = {name: block_in(b) for name, b in ff.get("blocks", {}).items()}
        values[b"ff"] = encode_frame(blocks, {"meta": ff.get("meta", {})},
                                     with_precision=False)

    document = dict(collection["meta"])
    document.setdefault("molrec_version", 1)  # every writer stamps it
    meta = {"layout": "mrec-lmdb", "layout_version": 1, "collection": document,
            "sequence_schema": schema, "n_records": n, "n_frames": sum(n_frames)}
    return values, json.dumps(meta, allow_nan=False).encode("utf-8")


def write_collection(path, collection):
    """Writes `collection` to a new `.mrec.lmdb` file at `path`.

    The file is built at `<path>.partial` and renamed into place once
    complete, so `path` never holds part of a collection. Every value but
    `meta` goes in one transaction; `meta` goes last, in a transaction of
    its own: a file whose writer died before that commit has no `meta`, and
    readers refuse it as uncommitted."""
    values, meta = collection_values(collection)
    partial = path + ".partial"
    if os.path.exists(partial):
        os.remove(partial)  # left by a writer that died
    # Room for the values and LMDB's pages around them (half-full leaves,
    # whole overflow pages). It only reserves address space: the file grows
    # with what is written.
    size = sum(len(k) + len(v) for k, v in values.items()) + len(meta)
    map_size = 4 * size + (64 << 20)
    # lock=False: no `-lock` file beside the partial file (the inspection
    # allows only `<name>-lock` beside a collection). Safe because nobody
    # else knows the partial path while it is written.
    env = lmdb.open(partial, subdir=False, lock=False, map_size=map_size)
    try:
        with env.begin(write=True) as txn:
            # In key order with append=True, LMDB fills each leaf page
            # instead of splitting it in the middle (half-empty pages). It
            # would refuse a key out of order; sorted bytes are LMDB's order.
            for k in sorted(values):
                txn.put(k, values[k], append=True)
        with env.begin(write=True) as txn:  # commits sync the file (sync=True)
            txn.put(b"meta", meta)
    except BaseException:
        env.close()
        os.remove(partial)
        raise
    env.close()
    os.replace(partial, path)


# ------------------------------------------------------------------ protocol

def send(message):
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def answer(request):
    """The answer line to one request (never raises for a bad file or a
    collection it cannot write)."""
    rid, op = request.get("id"), request.get("op")
    if op not in ("read", "write"):
        return json.dumps({"id": rid, "status": "unsupported"})
    try:
        if op == "write":
            write_collection(request["path"], request["collection"])
            return json.dumps({"id": rid, "status": "ok"})
        result = {"id": rid, "status": "ok", "collection": read_collection(request["path"])}
        return json.dumps(result, allow_nan=False)  # NaN must be a string by now
    except Refusal as e:
        return json.dumps({"id": rid, "status": "refused", "message": str(e), "clause": e.clause})
    except Exception as e:  # anything else: a refusal that names no clause
        traceback.print_exc(file=sys.stderr)
        return json.dumps({"id": rid, "status": "refused",
                           "message": f"{type(e).__name__}: {e}", "clause": None})


def main():
    sys.stdin.reconfigure(encoding="utf-8")
    send(json.dumps({"type": "hello", "protocol": 1, "name": NAME, "version": VERSION,
                     "capabilities": {"write": True, "read": True}}))
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "bye":
            break
        send(answer(request))


if __name__ == "__main__":
    main()
