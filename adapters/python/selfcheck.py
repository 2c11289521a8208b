#!/usr/bin/env python3
"""Self-check of mrec_adapter.py, no pytest: builds tiny .mrec.lmdb files and
talks to the adapter over the protocol exactly as the harness does (reads
them, writes one back and reads that).

Run: python3 adapters/python/selfcheck.py   (prints "N passed, 0 failed")
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import lmdb
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NUMPY = {"f64": "<f8", "u64": "<u8", "bool": "u1"}


def frame(blocks, **header):
    """blocks: {name: {column: (dtype, values)}} -> frame bytes."""
    payload, entries = bytearray(), {}
    for name, columns in blocks.items():
        cols = {}
        for col, (dtype, values) in columns.items():
            if dtype == "string":
                cols[col] = {"dtype": dtype, "shape": [len(values)], "values": values}
                continue
            array = np.asarray(values, dtype=NUMPY[dtype])
            cols[col] = {"dtype": dtype, "shape": list(array.shape), "offset": len(payload)}
            payload += array.tobytes()
            payload += bytes(-len(payload) % 8)
        count = next(iter(cols.values()))["shape"][0]
        entries[name] = {"count": count, "structural_shape": None, "columns": cols}
    head = json.dumps({"blocks": entries, **header}).encode()
    value = b"MRF1" + struct.pack("<I", len(head)) + head
    return value + bytes(-len(value) % 8) + bytes(payload)


def key(prefix, n):
    return prefix + struct.pack(">Q", n)


def header(value):
    """The JSON header of frame bytes: after "MRF1" and its u32 LE length."""
    (length,) = struct.unpack_from("<I", value, 4)
    return json.loads(value[8:8 + length])


def make(path, meta_patch=None, index_magic=b"MRF1", with_meta=True):
    meta = {"layout": "mrec-lmdb", "layout_version": 1,
            "collection": {"molrec_version": 1, "units": {"length": "angstrom"}},
            "sequence_schema": {"blocks": {"atoms": {"columns": {
                "x": {"dtype": "f64", "trailing": [3]}}}},
                "meta": {"pe": {"dtype": "f64"}}},
            "n_records": 1, "n_frames": 2}
    meta.update(meta_patch or {})
    index = frame({"records": {"first_frame": ("u64", [0]), "n_frames": ("u64", [2]),
                               "n_atoms": ("u64", [2]), "has_trajectory": ("bool", [1]),
                               "code": ("string", ["h2"]), "big": ("u64", [2**60])}})
    box = {"vectors": [[2.0, 0, 0], [0, 2.0, 0], [0, 0, 2.0]]}
    env = lmdb.open(path, subdir=False, map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"index", index_magic + index[4:])
        txn.put(key(b"r", 0), b'{"name": "h2"}')
        txn.put(key(b"s", 0), frame(
            {"atoms": {"element": ("string", ["H", "H"]), "atomic_number": ("u64", [1, 1])}},
            meta={"charge": 0}, meta_types={"charge": "i64"}))
        txn.put(key(b"f", 0), frame({"atoms": {"x": ("f64", [[0, 0, 0], [0.74, 0, float("nan")]])}},
                                    step=0, time=0.0, meta={"pe": -1.5}, box=box))
        txn.put(key(b"f", 1), frame({}, step=1, time=0.5, meta={"pe": "NaN"}))
        if with_meta:
            txn.put(b"meta", json.dumps(meta).encode())
    env.close()


class Adapter:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "mrec_adapter.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = json.loads(self.proc.stdout.readline())
        self.next_id = 0

    def ask(self, op, path, **extra):
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, "path": path, **extra}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == self.next_id, answer
        return answer

    def close(self):
        self.proc.stdin.write('{"op": "bye"}\n')
        self.proc.stdin.close()
        return self.proc.wait(timeout=10)


def main():
    passed, failed = 0, 0

    def check(name, condition, detail=""):
        nonlocal passed, failed
        passed, failed = passed + bool(condition), failed + (not condition)
        if not condition:
            print(f"FAIL {name}: {detail}", file=sys.stderr)

    adapter = Adapter()
    check("hello", adapter.hello["capabilities"] == {"write": True, "read": True}, adapter.hello)
    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good.mrec.lmdb")
        make(good)
        answer = adapter.ask("read", good)
        check("read ok", answer["status"] == "ok", answer)
        c = answer.get("collection", {})
        check("index own columns", set(c.get("index", {})) == {"code", "big"}, c.get("index"))
        check("big u64 as string", c["index"]["big"]["values"] == [str(2**60)], c["index"]["big"])
        record = c["records"][0]
        check("record meta", record["meta"] == {"name": "h2"}, record["meta"])
        check("system meta", record["system"]["meta_types"] == {"charge": "i64"}, record["system"])
        frames = record["trajectory"]["frames"]
        check("two frames", [f["step"] for f in frames] == [0, 1], frames)
        check("NaN as string", frames[0]["blocks"]["atoms"]["columns"]["x"]["values"][-1] == "NaN")
        check("carry-forward", frames[1]["blocks"] == frames[0]["blocks"], frames[1])
        check("box carried", frames[1].get("box") == frames[0]["box"], frames[1])
        check("per-step meta", frames[1]["meta"] == {"pe": "NaN"}, frames[1]["meta"])

        # Writing: what was read, written again, reads back the same.
        written = os.path.join(tmp, "written.mrec.lmdb")
        answer = adapter.ask("write", written, collection=c)
        check("write ok", answer["status"] == "ok", answer)
        beside = [n for n in os.listdir(tmp) if n.startswith("written")]
        check("nothing beside the file", beside == ["written.mrec.lmdb"], beside)  # no .partial, no -lock
        answer = adapter.ask("read", written)
        check("write round trip", answer.get("collection") == c, answer)
        env = lmdb.open(written, subdir=False, readonly=True, lock=False)
        with env.begin() as txn:
            stored = [header(txn.get(key(b"f", j))) for j in (0, 1)]
        env.close()
        # Frame 1 presents its blocks and box unchanged: they carry forward.
        check("first frame restates", set(stored[0]["blocks"]) == {"atoms"} and "box" in stored[0], stored[0])
        check("unchanged not rewritten", stored[1]["blocks"] == {} and "box" not in stored[1], stored[1])

        refusals = {
            "lmdb.meta.required": {"with_meta": False},
            "lmdb.meta.layout": {"meta_patch": {"layout": "ase"}},
            "lmdb.meta.layout-version": {"meta_patch": {"layout_version": 1.0}},
            "mrf1.magic": {"index_magic": b"MRF2"},
        }
        for clause, options in refusals.items():
            path = os.path.join(tmp, clause + ".mrec.lmdb")
            make(path, **options)
            answer = adapter.ask("read", path)
            check(clause, answer["status"] == "refused" and answer["clause"] == clause, answer)
        answer = adapter.ask("read", os.path.join(tmp, "missing.mrec.lmdb"))
        check("unnamed refusal", answer["status"] == "refused" and answer["clause"] is None, answer)
    check("bye", adapter.close() == 0)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
