"""The Python writer: records built from NumPy arrays (stacked and ragged),
read back as written; the context manager; index columns; to_ase."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

import mrec

UNITS = {"length": "angstrom", "energy": "eV", "force": "eV/angstrom"}


def water(n_frames: int, seed: int = 0) -> Dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "meta": {"name": "water", "seed": seed},
        "system": {
            "meta": {"charge": 0},
            "blocks": {
                "atoms": {
                    "columns": {
                        "element": np.array(["O", "H", "H"], dtype=object),
                        "atomic_number": np.array([8, 1, 1], dtype=np.uint64),
                    }
                },
                "bonds": {
                    "columns": {
                        "atomi": np.array([0, 0], dtype=np.uint64),
                        "atomj": np.array([1, 2], dtype=np.uint64),
                    }
                },
            },
            "cell": None,
        },
        "trajectory": {
            "step": np.arange(n_frames, dtype=np.int64),
            "time": np.arange(n_frames) * 0.5,
            "meta": {"pe": rng.normal(size=n_frames), "converged": np.arange(n_frames) % 2 == 0},
            "blocks": {
                "atoms": {
                    "columns": {
                        k: rng.normal(size=(n_frames, 3)) for k in ("x", "y", "z", "fx", "fy", "fz")
                    }
                }
            },
            "cell": {
                "present": np.ones(n_frames, dtype=bool),
                "vectors": np.broadcast_to(np.eye(3) * 10.0, (n_frames, 3, 3)).copy(),
                "origin": np.zeros((n_frames, 3)),
                "boundary": np.ones((n_frames, 3), dtype=bool),
                "defined": np.ones(n_frames, dtype=bool),
            },
        },
    }


def test_records_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "w.mrec.lmdb"
    records = [water(n, seed=n) for n in (1, 4, 7)]
    with mrec.Writer(path, units=UNITS, meta={"name": "test"}) as w:
        for r in records:
            w.append(meta=r["meta"], system=r["system"], trajectory=r["trajectory"])
        w.finish(index={"n_heavy": np.array([1, 1, 1], dtype=np.uint64)})
    c = mrec.open(path)
    assert len(c) == 3 and c.n_frames == 12
    assert c.units == UNITS and c.meta["name"] == "test"
    np.testing.assert_array_equal(c.index["n_heavy"], [1, 1, 1])
    np.testing.assert_array_equal(c.index["n_atoms"], [3, 3, 3])
    for got, want in zip(c, records):
        assert got["meta"] == want["meta"]
        np.testing.assert_array_equal(
            got["system"]["blocks"]["atoms"]["columns"]["element"],
            want["system"]["blocks"]["atoms"]["columns"]["element"],
        )
        t, wt = got["trajectory"], want["trajectory"]
        np.testing.assert_array_equal(t["step"], wt["step"])
        np.testing.assert_array_equal(t["time"], wt["time"])
        np.testing.assert_array_equal(t["meta"]["pe"], wt["meta"]["pe"])
        assert t["meta"]["converged"].dtype == np.bool_
        np.testing.assert_array_equal(t["meta"]["converged"], wt["meta"]["converged"])
        for k, v in wt["blocks"]["atoms"]["columns"].items():
            assert t["blocks"]["atoms"]["columns"][k].shape == v.shape
            np.testing.assert_array_equal(t["blocks"]["atoms"]["columns"][k], v)
        np.testing.assert_array_equal(t["cell"]["vectors"], wt["cell"]["vectors"])
        assert t["cell"]["defined"].all()


def test_a_record_read_appends_as_itself(tmp_path: Path) -> None:
    first, second = tmp_path / "a.mrec.lmdb", tmp_path / "b.mrec.lmdb"
    with mrec.Writer(first, units=UNITS) as w:
        w.append(water(5))
    a = mrec.open(first)
    with mrec.Writer(second, units=a.units, schema=a.schema) as w:
        w.append(a[0])
    b = mrec.open(second)
    ra, rb = a[0], b[0]
    assert ra["meta"] == rb["meta"]
    for k, v in ra["trajectory"]["blocks"]["atoms"]["columns"].items():
        np.testing.assert_array_equal(rb["trajectory"]["blocks"]["atoms"]["columns"][k], v)


def test_ragged_blocks_with_offsets_and_masks(tmp_path: Path) -> None:
    path = tmp_path / "r.mrec.lmdb"
    # Frame 0: no `hits` yet (absent); frame 1: emptied; then 3 rows, 1 row.
    offsets = np.array([0, 0, 0, 3, 4])
    values = np.arange(8, dtype=np.float64).reshape(4, 2)
    mask = np.array([True, False, True, True])
    schema = {
        "blocks": {
            "hits": {
                "columns": {
                    "v": {"dtype": "f64", "trailing": [2], "nullable": True},
                    "hit": {"dtype": "i32"},
                }
            }
        },
        "meta": {"label": {"dtype": "string"}, "spin": {"dtype": "i32x3"}},
    }
    trajectory = {
        "step": np.array([0, 1, 2, 3]),
        "meta": {
            "label": np.array(["a", "b", "", "d\x00"], dtype=object),
            "spin": np.arange(12, dtype=np.int32).reshape(4, 3),
        },
        "blocks": {
            "hits": {
                "present": np.array([False, True, True, True]),
                "offsets": offsets,
                "columns": {"v": values, "hit": np.arange(4, dtype=np.int32)},
                "validity": {"v": mask},
            }
        },
    }
    with mrec.Writer(path, units=UNITS, schema=schema) as w:
        w.append(meta={}, trajectory=trajectory)
    t = mrec.open(path)[0]["trajectory"]
    hits = t["blocks"]["hits"]
    np.testing.assert_array_equal(hits["present"], [False, True, True, True])
    np.testing.assert_array_equal(hits["count"], [0, 0, 3, 1])
    np.testing.assert_array_equal(hits["offsets"], offsets)
    np.testing.assert_array_equal(hits["columns"]["v"], values)
    assert hits["columns"]["v"].shape == (4, 2)
    assert hits["columns"]["hit"].dtype == np.int32
    np.testing.assert_array_equal(hits["validity"]["v"], mask)
    assert list(t["meta"]["label"]) == ["a", "b", "", "d\x00"]
    assert t["meta"]["spin"].dtype == np.int32 and t["meta"]["spin"].shape == (4, 3)
    np.testing.assert_array_equal(t["meta"]["spin"], np.arange(12).reshape(4, 3))
    # The batch: always flat rows with per-frame offsets.
    b = mrec.open(path).batch([0, 0])
    np.testing.assert_array_equal(
        b["trajectory"]["blocks"]["hits"]["offsets"], [0, 0, 0, 3, 4, 4, 4, 7, 8]
    )
    np.testing.assert_array_equal(b["trajectory"]["offsets"], [0, 4, 8])


def test_leaving_the_with_block_by_an_exception_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "never.mrec.lmdb"
    with pytest.raises(KeyError):
        with mrec.Writer(path, units=UNITS) as w:
            w.append(water(2))
            raise KeyError("stop")
    assert not path.exists()
    assert not Path(str(path) + ".partial").exists()


def test_an_index_of_the_wrong_length_is_refused(tmp_path: Path) -> None:
    w = mrec.Writer(tmp_path / "i.mrec.lmdb", units=UNITS)
    w.append(water(1))
    with pytest.raises(mrec.Refused) as info:
        w.finish(index={"code": np.array(["a", "b"], dtype=object)})
    assert info.value.clause == "collection.index.row-count"
    assert info.value.path == "index.code"


def test_forcefield_round_trips(tmp_path: Path) -> None:
    import json

    from conftest import FIXTURES

    doc = json.loads((FIXTURES / "collection" / "forcefield-tip3p.json").read_text())
    ff = doc["forcefield"]
    path = tmp_path / "ff.mrec.lmdb"
    with mrec.Writer(path, units=doc["meta"]["units"], forcefield=ff) as w:
        w.append(water(1))
    got = mrec.open(path).forcefield
    assert got is not None
    assert got["meta"] == ff["meta"]
    assert sorted(got["blocks"]) == sorted(ff["blocks"])


def test_to_ase(tmp_path: Path) -> None:
    pytest.importorskip("ase")
    path = tmp_path / "ase.mrec.lmdb"
    rec = water(3)
    with mrec.Writer(path, units=UNITS) as w:
        w.append(rec)
    got = mrec.open(path)[0]
    atoms = mrec.to_ase(got, 2)
    assert atoms.get_chemical_symbols() == ["O", "H", "H"]
    cols = rec["trajectory"]["blocks"]["atoms"]["columns"]
    want = np.stack([cols["x"][2], cols["y"][2], cols["z"][2]], axis=-1)
    np.testing.assert_allclose(atoms.get_positions(), want, rtol=0, atol=0)
    np.testing.assert_array_equal(atoms.get_cell()[:], np.eye(3) * 10.0)
    assert atoms.get_pbc().all()
    forces = np.stack([cols["fx"][2], cols["fy"][2], cols["fz"][2]], axis=-1)
    np.testing.assert_array_equal(atoms.get_forces(), forces)
    assert atoms.get_potential_energy() == rec["trajectory"]["meta"]["pe"][2]
    with pytest.raises(IndexError):
        mrec.to_ase(got, 3)


def test_a_block_absent_after_it_appeared_is_refused(tmp_path: Path) -> None:
    rec = water(3)
    rec["trajectory"]["blocks"]["atoms"]["present"] = np.array([True, False, True])
    with mrec.Writer(tmp_path / "p.mrec.lmdb", units=UNITS) as w:
        with pytest.raises(ValueError, match="absent at frame 1"):
            w.append(rec)
        assert w.records == 0
        w.append(water(3))


def test_a_block_without_columns_takes_its_counts(tmp_path: Path) -> None:
    path = tmp_path / "c.mrec.lmdb"
    rec = water(3)
    rec["trajectory"]["blocks"]["sites"] = {"count": np.array([2, 0, 5])}
    with mrec.Writer(path, units=UNITS) as w:
        w.append(rec)
    sites = mrec.open(path)[0]["trajectory"]["blocks"]["sites"]
    np.testing.assert_array_equal(sites["count"], [2, 0, 5])
    np.testing.assert_array_equal(sites["offsets"], [0, 2, 2, 7])
    assert sites["columns"] == {}


def test_without_a_schema_per_step_tags_follow_the_dtypes(tmp_path: Path) -> None:
    path = tmp_path / "tags.mrec.lmdb"
    n = 3
    meta = {
        "pe": np.array([1.0, float("nan"), -2.5]),
        "n_iter": np.array([1, 2, 3], dtype=np.int32),
        "big": np.array([2**63, 1, 0], dtype=np.uint64),
        "spin": np.arange(9, dtype=np.int32).reshape(3, 3),
        "dipole": np.arange(9, dtype=np.float64).reshape(3, 3),
        "flags": np.array([[True, False, True]] * 3),
        "label": np.array(["a", "b", "c"], dtype=object),
        "extra": [{"k": 1}, None, [1, 2]],
    }
    with mrec.Writer(path, units=UNITS) as w:
        for seed in range(2):
            rec = water(n, seed)
            rec["trajectory"]["meta"] = meta
            w.append(rec)
        # A record whose key has another dtype disagrees with the others.
        other = water(n)
        other["trajectory"]["meta"] = dict(meta, n_iter=np.array([1, 2, 3], dtype=np.int64))
        with pytest.raises(mrec.Refused):
            w.append(other)
    c = mrec.open(path)
    tags = {k: v["dtype"] for k, v in c.schema["meta"].items()}
    assert tags == {
        "pe": "f64",
        "n_iter": "i32",
        "big": "u64",
        "spin": "i32x3",
        "dipole": "f64x3",
        "flags": "bool3",
        "label": "string",
        "extra": "json",
    }
    t = c[1]["trajectory"]["meta"]
    for key, want in meta.items():
        if isinstance(want, list):
            assert t[key] == want
        else:
            assert t[key].dtype == want.dtype, key
            np.testing.assert_array_equal(t[key], want)
