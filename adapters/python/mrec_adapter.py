#!/usr/bin/env python3
"""Template molrec adapter: reads `.mrec.lmdb` collections for the harness.

Speaks the harness's subprocess protocol (version 1, docs/adapters.md):
one JSON object per line on stdin/stdout, diagnostics on stderr only.
It is read-only: it answers `read` with the collection in canonical JSON
(resolved form, docs/canonical-json.md) and says `unsupported` to `write`.

It is a starting point, not a conforming reader: it checks only the few
things that name a clause below. Copy it and grow it.
"""
import json
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
    if "box" in header:
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
        if "box" in header:
            box = decode_box(header["box"])
        frame = {"step": header["step"]}
        if "time" in header:
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


# ------------------------------------------------------------------ protocol

def send(message):
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def answer(request):
    """The answer line to one request (never raises for a bad file)."""
    rid = request.get("id")
    if request.get("op") != "read":
        return json.dumps({"id": rid, "status": "unsupported"})
    try:
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
                     "capabilities": {"write": False, "read": True}}))
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "bye":
            break
        send(answer(request))


if __name__ == "__main__":
    main()
