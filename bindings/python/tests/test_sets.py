"""Sharded sets from Python (docs/shards.md): ``mrec.open`` of a directory,
a pattern, a manifest or a list of files reads the shards as the one
collection they were split from (records, batches, frames by ordinal,
index, structures, sampler); a pickled set opens only the shards a worker
reads; shards that do not form a set are refused naming the shard; each
shard's content digest is kept in the manifest and ``verify=True`` names
a shard whose bytes changed."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import random
import subprocess
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest

import mrec
import workers
from mrec import _native

#: Records of the whole collection and where the shards cut it: a shard
#: of no records among them.
N = 40
CUTS = [(0, 13), (13, 13), (13, 31), (31, 40)]


def split(tmp: Path) -> Tuple[mrec.Collection, Path, List[Path]]:
    """The whole collection, and a directory of its records cut into
    shards (each its own collection, with the whole one's declaration)."""
    whole = tmp / "whole.mrec.lmdb"
    workers.make_collection(whole, N)
    c = mrec.open(whole)
    codes = c.own_index()["code"]
    shard_dir = tmp / "shards"
    shard_dir.mkdir()
    files = []
    for i, (lo, hi) in enumerate(CUTS):
        path = shard_dir / f"part-{i:03d}.mrec.lmdb"
        with mrec.Writer(path, units=c.units, schema=c.schema) as w:
            for r in range(lo, hi):
                w.append(c[r])
            w.finish(index={"code": codes[lo:hi]})
        files.append(path)
    return c, shard_dir, files


def same_arrays(a, b, at: str = "") -> None:
    """Equal nested dicts / lists of arrays (NaN equal to NaN)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), f"{at}: {sorted(a)} != {sorted(b)}"
        for k in a:
            same_arrays(a[k], b[k], f"{at}.{k}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{at}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if a.dtype == object:
            assert list(a.reshape(-1)) == list(b.reshape(-1)), at
        else:
            np.testing.assert_array_equal(a, b, err_msg=at)
    elif isinstance(a, list):
        assert len(a) == len(b), at
        for i, (x, y) in enumerate(zip(a, b)):
            same_arrays(x, y, f"{at}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{at}: {a!r} != {b!r}"


def test_a_set_reads_as_the_collection_it_was_split_from(tmp_path: Path) -> None:
    whole, shard_dir, files = split(tmp_path)
    for source in (shard_dir, str(shard_dir / "part-*.mrec.lmdb"), files):
        s = mrec.open(source)
        assert s.is_set and s.n_shards == len(CUTS)
        assert (len(s), s.n_frames) == (len(whole), whole.n_frames)
        assert s.units == whole.units and s.schema == whole.schema
        for r in range(len(s)):
            assert workers.digest(s[r]) == workers.digest(whole[r]), r
    s = mrec.open(shard_dir)
    # A batch across every shard boundary, in a shuffled order.
    order = list(range(N))
    random.Random(1).shuffle(order)
    same_arrays(s.batch(order), whole.batch(order), "batch")
    # Frames by ordinal across shards; their records numbered in the set.
    js = list(range(whole.n_frames))
    random.Random(2).shuffle(js)
    same_arrays(s.frames(js, system=True, record_meta=True), whole.frames(js, system=True, record_meta=True), "frames")
    for j in (0, whole.n_frames - 1, js[5], -1):
        assert s.locate(j) == whole.locate(j)
    # The index: the binding's four columns and the own ones, shard after shard.
    same_arrays(s.index, whole.index, "index")
    counts = whole.index["n_frames"]
    first, frames = int(counts[:13].sum()), int(counts[13:31].sum())
    assert s.shard_ranges()[2] == (str(files[2]), 13, 18, first, frames)


def test_structures_and_the_sampler_take_a_set_as_they_take_a_file(tmp_path: Path) -> None:
    whole, shard_dir, files = split(tmp_path)
    _native.write_manifest([str(f) for f in files], str(shard_dir))
    for source in (shard_dir, mrec.open(shard_dir)):
        ds = mrec.Structures(source, keys=["energy"])
        want = mrec.Structures(whole, keys=["energy"])
        assert len(ds) == len(want) == whole.n_frames
        idx = list(range(len(ds)))
        random.Random(3).shuffle(idx)
        got, expected = ds.batch(idx), want.batch(idx)
        for key in ("atomic_numbers", "pos", "natoms", "energy", "cell", "batch", "record", "frame"):
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
        np.testing.assert_array_equal(ds.natoms, want.natoms)
        a = mrec.FrameSampler(ds, seed=5, batch_size=16, world_size=2, rank=1)
        b = mrec.FrameSampler(want, seed=5, batch_size=16, world_size=2, rank=1)
        assert [list(x) for x in a] == [list(x) for x in b]


def test_a_manifest_opens_no_shard_and_a_worker_opens_only_what_it_reads(tmp_path: Path) -> None:
    whole, shard_dir, files = split(tmp_path)
    path = _native.write_manifest([str(f) for f in files], str(shard_dir))
    assert Path(path) == shard_dir / "mrec-set.json"
    s = mrec.open(shard_dir)
    assert s.open_shards() == []
    assert len(s) == N and s.n_frames == whole.n_frames
    s[20]  # in shard 2
    assert s.open_shards() == [2]
    # Pickled, the set is its description: a worker opens shard 3 alone.
    back = pickle.loads(pickle.dumps(s))
    assert back.shard_paths == [str(f) for f in files]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        digests, opened = pool.map(workers.read_and_say_what_opened, [(s, [31, 39])])[0]
    assert opened == [3]
    assert digests == [workers.digest(whole[31]), workers.digest(whole[39])]
    # A Dataset over the set, in a fork pool too.
    ds = mrec.Dataset(shard_dir)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map(workers.dataset_item, [(ds, r) for r in range(N)])
    assert [workers.digest(g) for g in got] == [workers.digest(whole[r]) for r in range(N)]


def test_shards_whose_declarations_differ_are_refused_naming_the_shard(tmp_path: Path) -> None:
    whole, shard_dir, files = split(tmp_path)
    other = shard_dir / "part-009.mrec.lmdb"
    with mrec.Writer(other, units={"length": "nm", "energy": "eV"}, schema=whole.schema) as w:
        w.append(whole[0])
    with pytest.raises(mrec.SetRefused) as e:
        mrec.open(shard_dir)
    assert e.value.problem == "declaration"
    assert e.value.shard == "part-009.mrec.lmdb"
    assert "units.length" in str(e.value) and "part-000.mrec.lmdb" in str(e.value)
    again = pickle.loads(pickle.dumps(e.value))
    assert (again.problem, again.shard) == ("declaration", "part-009.mrec.lmdb")
    with pytest.raises(mrec.SetRefused) as e:
        _native.write_manifest([str(f) for f in files] + [str(other)], str(shard_dir))
    assert e.value.shard == "part-009.mrec.lmdb"
    assert not (shard_dir / "mrec-set.json").exists()


def test_a_shard_missing_or_changed_since_the_manifest_is_refused(tmp_path: Path) -> None:
    whole, shard_dir, files = split(tmp_path)
    _native.write_manifest([str(f) for f in files], str(shard_dir))
    s = mrec.open(shard_dir)
    state = pickle.dumps(s)
    # Changed after the set was described: refused when the shard opens.
    with mrec.Writer(files[3], units=whole.units, schema=whole.schema, overwrite=True) as w:
        for r in range(30):
            w.append(whole[r % N])
    later = pickle.loads(state)
    with pytest.raises(mrec.SetRefused) as e:
        later[35]
    assert (e.value.problem, e.value.shard) == ("changed", "part-003.mrec.lmdb")
    assert later[0] is not None  # the other shards still read
    files[1].unlink()
    with pytest.raises(mrec.SetRefused) as e:
        mrec.open(shard_dir)
    assert (e.value.problem, e.value.shard) == ("missing", "part-001.mrec.lmdb")


def test_a_refusal_inside_a_shard_names_the_shard_file(tmp_path: Path) -> None:
    _, shard_dir, files = split(tmp_path)
    files[2].write_bytes(b"")
    with pytest.raises(mrec.Uncommitted) as e:
        mrec.open(shard_dir)
    assert e.value.file == str(files[2])


def flip_byte(path: Path, at: int) -> None:
    """One byte of ``path`` changed in place (its size kept)."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def libxxhash_digest(path: Path) -> str:
    """XXH3-128 of the file by the reference C library (libxxhash,
    through ctypes), as ``xxhsum -H2`` prints it; a skip without it."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        pytest.skip(f"no libxxhash to compare the digests with: {e}")

    class Hash128(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]

    lib.XXH3_128bits.restype = Hash128
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    data = path.read_bytes()
    h = lib.XXH3_128bits(data, len(data))
    return f"{h.high64:016x}{h.low64:016x}"


def test_verify_names_a_shard_whose_bytes_changed(tmp_path: Path) -> None:
    whole, shard_dir, files = split(tmp_path)
    _native.write_manifest([str(f) for f in files], str(shard_dir))
    manifest = json.loads((shard_dir / "mrec-set.json").read_text())
    kept = [s["xxh3_128"] for s in manifest["shards"]]
    # The digests are the reference implementation's XXH3-128 of each file.
    assert kept == [libxxhash_digest(f) for f in files]
    s = mrec.open(shard_dir, verify=True)
    assert len(s) == N
    # A byte past the first meta page's fields, which no reader reads: the
    # set still opens and reads, and verify names the shard.
    flip_byte(files[2], 5000)
    assert len(mrec.open(shard_dir)) == N
    with pytest.raises(mrec.DigestMismatch) as e:
        mrec.open(shard_dir, verify=True)
    assert isinstance(e.value, mrec.SetRefused) and isinstance(e.value, ValueError)
    assert (e.value.problem, e.value.shard) == ("digest", "part-002.mrec.lmdb")
    assert (e.value.expected, e.value.actual) == (kept[2], _native.file_digest(str(files[2])))
    assert e.value.expected != e.value.actual
    assert f"xxh3_128 expected {kept[2]}, actual {e.value.actual}" in str(e.value)
    again = pickle.loads(pickle.dumps(e.value))
    assert (type(again), again.shard, again.expected, again.actual) == (
        mrec.DigestMismatch,
        "part-002.mrec.lmdb",
        e.value.expected,
        e.value.actual,
    )
    # A manifest written before digests: nothing to verify against.
    for shard in manifest["shards"]:
        del shard["xxh3_128"]
    (shard_dir / "mrec-set.json").write_text(json.dumps(manifest))
    assert len(mrec.open(shard_dir)) == N
    with pytest.raises(mrec.SetRefused) as e:
        mrec.open(shard_dir, verify=True)
    assert (e.value.problem, e.value.shard) == ("no-digest", "part-000.mrec.lmdb")


def test_writers_hand_over_the_digest_the_manifest_keeps(tmp_path: Path) -> None:
    whole, shard_dir, files = split(tmp_path)
    path = tmp_path / "again.mrec.lmdb"
    with mrec.Writer(path, units=whole.units, schema=whole.schema, digest=True) as w:
        w.append(whole[0])
        digest = w.finish()
    assert digest == _native.file_digest(str(path)) == libxxhash_digest(path)
    plain = mrec.Writer(tmp_path / "plain.mrec.lmdb", units=whole.units, schema=whole.schema)
    plain.append(whole[0])
    assert plain.finish() is None
    # Given digests are kept as given (the tasks that wrote the shards
    # computed them); the others are computed.
    given = ["0123456789abcdef" * 2, None, None, None]
    _native.write_manifest([str(f) for f in files], str(shard_dir), digests=given)
    manifest = json.loads((shard_dir / "mrec-set.json").read_text())
    assert [s["xxh3_128"] for s in manifest["shards"]] == [given[0]] + [libxxhash_digest(f) for f in files[1:]]
    with pytest.raises(mrec.DigestMismatch):
        mrec.open(shard_dir, verify=True)
    for bad in (["0123456789ABCDEF" * 2, None, None, None], [None]):
        with pytest.raises(ValueError):
            _native.write_manifest([str(f) for f in files], str(shard_dir), digests=bad)


def test_a_file_alone_is_verified_against_its_own_manifest(tmp_path: Path, mrec_cli: str) -> None:
    path = tmp_path / "one.mrec.lmdb"
    workers.make_collection(path, 5)
    with pytest.raises(mrec.SetRefused) as e:
        mrec.open(path, verify=True)
    assert (e.value.problem, e.value.shard) == ("no-digest", "one.mrec.lmdb")
    subprocess.run([mrec_cli, "set", "manifest", str(path)], check=True, capture_output=True)
    assert (tmp_path / "one.mrec.lmdb.mrec-set.json").is_file()
    c = mrec.open(path, verify=True)
    assert not c.is_set and len(c) == 5
    flip_byte(path, 40_000)
    with pytest.raises(mrec.DigestMismatch) as e:
        mrec.open(path, verify=True)
    assert e.value.shard == "one.mrec.lmdb"
