"""The record rows of ``mrec.ray`` (``mrec._arrow``), without Ray: a
record made a row and read back is the record ``mrec.open`` reads, for
every collection fixture, every per-step tag, and records with and
without a trajectory, a system, times, cells or some of the declared
columns; the Python writer takes the records back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason='needs pyarrow (pip install "mrec[ray]")')

import mrec  # noqa: E402
from conftest import FIXTURES, dump_with_cli, record_json, same, write_with_cli  # noqa: E402
from mrec import _arrow  # noqa: E402

#: The collection fixtures a writer takes (the others are refusals).
WRITTEN = sorted(p for p in (FIXTURES / "collection").glob("*.json") if not p.name.startswith("refuse-"))


def test_the_fixtures_are_there() -> None:
    assert len(WRITTEN) >= 50


def rows_and_back(c: mrec.Collection, order: List[int]) -> List[Dict[str, Any]]:
    """Records ``order`` of ``c`` as record rows (one batch, as a read
    task makes them), and the records read back from those rows (as a
    write task does)."""
    layout = _arrow.RecordLayout.of(c)
    flags = c._reader().binding_index()["has_trajectory"]
    table = _arrow.records_table(c.batch(order), 0, flags[order], layout)
    assert table["record"].to_pylist() == order
    return list(_arrow.records_from_table(table, _arrow.layout_of_table(table.schema, c.schema)))


def assert_rows_give_the_records_back(c: mrec.Collection) -> List[Dict[str, Any]]:
    """Every record of ``c`` made a row and read back equals the record:
    in one batch (in reverse, so that records meet each other's columns
    in another order), and one batch per record, whose tables have one
    schema (a set's read tasks' blocks concatenate). Returns the records
    read back, in order."""
    n = len(c)
    want = [record_json(c[r]) for r in range(n)]
    back = rows_and_back(c, list(range(n))[::-1])[::-1]
    for r in range(n):
        same(record_json(back[r]), want[r], f"record {r}")
    if n:
        layout = _arrow.RecordLayout.of(c)
        flags = c._reader().binding_index()["has_trajectory"]
        tables = [_arrow.records_table(c.batch([r]), r, flags[[r]], layout) for r in range(n)]
        table = pa.concat_tables(tables[::-1])
        alone = list(_arrow.records_from_table(table.slice(1), _arrow.layout_of_table(table.schema, c.schema)))
        for k, rec in enumerate(alone):
            r = n - 2 - k
            same(record_json(rec), want[r], f"record {r} read alone")
    return back


def copy_with_python(c: mrec.Collection, records: List[Dict[str, Any]], out: Path) -> None:
    meta = dict(c.meta)
    units = meta.pop("units")
    with mrec.Writer(out, units=units, meta=meta, schema=c.schema, forcefield=c.forcefield) as w:
        for record in records:
            w.append(record)
        w.finish(index=c.own_index(), validity=c.index_validity, precision=c.index_precision)


@pytest.mark.parametrize("fixture", WRITTEN, ids=[p.stem for p in WRITTEN])
def test_every_fixture_comes_back_from_record_rows(fixture: Path, mrec_cli: str, tmp_path: Path) -> None:
    path = tmp_path / "c.mrec.lmdb"
    write_with_cli(mrec_cli, fixture, path)
    c = mrec.open(path)
    back = assert_rows_give_the_records_back(c)
    copy = tmp_path / "copy.mrec.lmdb"
    copy_with_python(c, back, copy)
    same(dump_with_cli(mrec_cli, copy)["records"], dump_with_cli(mrec_cli, path)["records"], "copy")


#: Every per-step tag, with values of its extremes.
TAGS: Dict[str, Any] = {
    "f64": np.array([-0.0, np.nan, np.inf]),
    "i32": np.array([-(2**31), 0, 2**31 - 1], np.int32),
    "i64": np.array([-(2**63), 2**53 + 1, 2**63 - 1], np.int64),
    "u32": np.array([0, 1, 2**32 - 1], np.uint32),
    "u64": np.array([0, 2**53 + 1, 2**64 - 1], np.uint64),
    "bool": np.array([True, False, True]),
    "string": np.array(["", "a\x00b", "é"], dtype=object),
    "json": [None, {"a": [1, 2.5]}, "text"],
    "bool3": np.array([[True, False, True], [False, False, False], [True, True, True]]),
    "i32x3": np.array([[-(2**31), 0, 1]] * 3, np.int32),
    "i64x3": np.array([[-(2**63), 0, 2**63 - 1]] * 3, np.int64),
    "u32x3": np.array([[0, 1, 2**32 - 1]] * 3, np.uint32),
    "u64x3": np.array([[0, 1, 2**64 - 1]] * 3, np.uint64),
    "f64x3": np.array([[-0.0, np.nan, -np.inf]] * 3),
    "f64x6": np.arange(18, dtype=np.float64).reshape(3, 6) - 9.5,
    "f64x9": np.arange(27, dtype=np.float64).reshape(3, 9) * -0.25,
}


def test_every_per_step_tag_and_part_a_record_may_lack_comes_back(mrec_cli: str, tmp_path: Path) -> None:
    """Records with every per-step tag, and with or without a trajectory,
    frames, times, a cell, a system, a system cell, a block, a column
    (system and trajectory, strings and complex values too) or a valid
    row (values under invalid rows kept)."""
    schema = {
        "meta": {f"k_{tag}": {"dtype": tag} for tag in TAGS},
        "blocks": {
            "atoms": {"columns": {
                "x": {"dtype": "f64"},
                "fx": {"dtype": "f64"},
                "label": {"dtype": "string", "nullable": True},
                "wave": {"dtype": "c64", "trailing": [2], "nullable": True},
            }},
            "probe": {"columns": {"amp": {"dtype": "c128"}}},
        },
    }
    cell = {"vectors": np.eye(3) * 4.0, "origin": np.array([0.0, -0.0, 1.5]), "boundary": np.array([True, False, True]), "defined": True}
    system = {
        "meta": {"charge": 0},
        "blocks": {"atoms": {
            "columns": {
                "element": np.array(["O", "H"], dtype=object),
                "q": np.array([1 + 2j, -0.0 - 1j], np.complex128),
                "fixed": np.array([[True, False, True], [False, False, False]]),
            },
            "validity": {"element": np.array([True, False])},
            "attributes": {"source": "test"},
        }},
        "cell": cell,
    }
    bare_system = {"meta": {}, "blocks": {
        "atoms": {"columns": {"element": np.array(["C", "N"], dtype=object)}},
        "sites": {"count": 3},
    }}

    def trajectory(**parts: Any) -> Dict[str, Any]:
        t = {"step": np.array([0, 5, 9]), "meta": {f"k_{tag}": v for tag, v in TAGS.items()}, "blocks": parts.pop("blocks", {})}
        t.update(parts)
        return t

    atoms = {
        "columns": {
            "x": np.array([[0.5, -0.0], [1.5, 2.5], [np.nan, 3.0]]),
            "label": np.array([["a", "bb"], ["", "c"], ["d", "e"]], dtype=object),
            "wave": np.ones((3, 2, 2), np.complex64) * (1 - 1j),
        },
        "validity": {"label": np.array([True, False, True, True, False, True]), "wave": np.array([True] * 5 + [False])},
    }
    records = [
        {"meta": {"name": "everything"}, "system": system, "trajectory": trajectory(
            time=np.array([0.0, 0.5, np.nan]),
            blocks={"atoms": atoms, "probe": {"present": np.array([False, True, True]), "offsets": np.array([0, 0, 1, 1]),
                                              "columns": {"amp": np.array([-0.0 + 3j])}}},
            cell={"present": np.array([False, True, False]), "vectors": np.stack([np.eye(3)] * 3),
                  "origin": np.zeros((3, 3)), "boundary": np.ones((3, 3), bool), "defined": np.array([True] * 3)},
        )},
        {"meta": {"name": "no system, other columns"}, "trajectory": trajectory(
            blocks={"atoms": {"columns": {"x": np.zeros((3, 1)), "fx": np.ones((3, 1))}}},
        )},
        {"meta": {"name": "no trajectory"}, "system": bare_system},
        {"meta": {"name": "no frames"}, "trajectory": {"step": np.zeros(0, np.int64), "meta": {}}},
        {"meta": {"name": "empty block"}, "trajectory": trajectory(
            time=np.array([1.0, 2.0, 3.0]),
            blocks={"atoms": {"count": np.zeros(3, np.int64), "offsets": np.zeros(4, np.int64), "columns": {
                "x": np.zeros(0), "label": np.zeros(0, dtype=object)}}},
        )},
    ]
    path = tmp_path / "tags.mrec.lmdb"
    with mrec.Writer(path, units={"length": "angstrom"}, schema=schema) as w:
        for record in records:
            w.append(record)
    c = mrec.open(path)
    assert c.schema["meta"]["k_f64x9"]["dtype"] == "f64x9"
    # What a record lacks is null in its row.
    table = _arrow.records_table(c.batch(range(5)), 0, c.index["has_trajectory"], _arrow.RecordLayout.of(c))
    nulls = {name: table[name].is_null().to_pylist() for name in ("time", "atoms.fx", "atoms.wave", "system", "system.atoms.q")}
    assert nulls == {
        "time": [False, True, True, True, False],
        "atoms.fx": [True, False, True, True, True],
        "atoms.wave": [False, True, True, True, True],
        "system": [False, True, False, True, True],
        "system.atoms.q": [False, True, True, True, True],
    }
    back = assert_rows_give_the_records_back(c)
    for key, values in TAGS.items():
        got = back[0]["trajectory"]["meta"][f"k_{key}"]
        if key == "json":
            assert got == values
        else:
            assert got.dtype == values.dtype and got.shape == values.shape, key
    assert back[0]["trajectory"]["time"] is not None and back[1]["trajectory"]["time"] is None
    assert sorted(back[1]["trajectory"]["blocks"]["atoms"]["columns"]) == ["fx", "x"]
    assert back[2]["trajectory"] is None and back[3]["system"] is None and back[3]["trajectory"]["n_frames"] == 0
    copy = tmp_path / "copy.mrec.lmdb"
    copy_with_python(c, back, copy)
    same(dump_with_cli(mrec_cli, copy)["records"], dump_with_cli(mrec_cli, path)["records"], "copy")


def test_a_system_column_of_another_dtype_or_row_shape_is_refused_not_mixed_up(tmp_path: Path) -> None:
    """Systems are not declared: one column may be f64 in a record, i32 or
    (2,)-rows in another. A batch keeps the first record's kind and says
    which records differ (their values no one else's); record rows,
    which hold one kind per column, refuse such a batch by name."""
    qs = [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.5, 2.5]), np.array([7, 8], np.int32), np.array([[5.0, 6.0]] * 2)]
    path = tmp_path / "q.mrec.lmdb"
    with mrec.Writer(path, units={"length": "angstrom"}, schema={"meta": {}, "blocks": {}}) as w:
        for q in qs:
            w.append({"meta": {}, "system": {"meta": {}, "blocks": {"atoms": {"columns": {"q": q}}}}})
    c = mrec.open(path)
    b = c.batch(range(4))["system"]["blocks"]["atoms"]
    assert b["differs"]["q"].tolist() == [False, True, True, False] and not b["lacks"]
    np.testing.assert_array_equal(b["columns"]["q"], np.concatenate([qs[0], np.zeros((4, 2)), qs[3]]))
    assert b["validity"]["q"].tolist() == [True, True, False, False, False, False, True, True]
    with pytest.raises(ValueError, match="system column `atoms.q` has another dtype or row shape in record 1"):
        _arrow.records_table(c.batch(range(4)), 0, c.index["has_trajectory"], _arrow.RecordLayout.of(c))
    for r in (0, 3):  # alone, those of the set's kind come back
        (back,) = rows_and_back(c, [r])
        same(record_json(back), record_json(c[r]), f"record {r}")
    with pytest.raises(ValueError, match=r"system column `atoms.q` \(i32, rows \(\)\) is not as in the set's first"):
        rows_and_back(c, [2])
