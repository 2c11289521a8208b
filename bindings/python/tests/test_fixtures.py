"""Every positive fixture of the suite, written by the Rust CLI and read
through Python, equals the Rust reader's canonical JSON (`mrec dump`); the
same collection copied record by record by the Python writer dumps the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

import mrec
from conftest import FIXTURES, collection_json, dump_with_cli, positive_cases, same, write_with_cli

CASES = positive_cases()


def test_the_suite_has_positive_fixtures() -> None:
    if not CASES:
        pytest.skip("tomllib (Python >= 3.11) reads the suite")
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_python_reads_what_rust_dumps(case: Dict[str, Any], mrec_cli: str, tmp_path: Path) -> None:
    path = tmp_path / "c.mrec.lmdb"
    write_with_cli(mrec_cli, FIXTURES / case["fixture"], path)
    want = dump_with_cli(mrec_cli, path)
    for checked in (False, True):
        c = mrec.open(path, checked=checked)
        got = collection_json(c)
        same(got, want, "collection")
        assert c.n_frames == sum(len(r.get("trajectory", {}).get("frames", [])) for r in want["records"])
        index = c.index
        assert list(index["n_frames"]) == [
            len(r.get("trajectory", {}).get("frames", [])) for r in want["records"]
        ]
        assert list(index["has_trajectory"]) == ["trajectory" in r for r in want["records"]]
        assert index["first_frame"][0] == 0 if len(c) else True


def copy_with_python(c: mrec.Collection, out: Path) -> None:
    meta = dict(c.meta)
    units = meta.pop("units")
    with mrec.Writer(out, units=units, meta=meta, schema=c.schema, forcefield=c.forcefield) as w:
        for r in range(len(c)):
            w.append(c[r])
        assert w.records == len(c)
        w.finish(index=c.own_index(), validity=c.index_validity, precision=c.index_precision)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_python_writer_copies_every_fixture(
    case: Dict[str, Any], mrec_cli: str, tmp_path: Path
) -> None:
    path = tmp_path / "c.mrec.lmdb"
    write_with_cli(mrec_cli, FIXTURES / case["fixture"], path)
    copy = tmp_path / "copy.mrec.lmdb"
    copy_with_python(mrec.open(path), copy)
    same(dump_with_cli(mrec_cli, copy), dump_with_cli(mrec_cli, path), "copy")


def test_batch_is_the_records_concatenated(mrec_cli: str, tmp_path: Path) -> None:
    for case in CASES:
        path = tmp_path / (case["id"] + ".mrec.lmdb")
        write_with_cli(mrec_cli, FIXTURES / case["fixture"], path)
        c = mrec.open(path)
        order = list(range(len(c)))[::-1] + [0] * min(1, len(c))
        b = c.batch(order)
        assert list(b["records"]) == order
        t = b["trajectory"]
        assert t["offsets"][0] == 0 and t["offsets"][-1] == t["n_frames"]
        for i, r in enumerate(order):
            rec = c[r]
            lo, hi = int(t["offsets"][i]), int(t["offsets"][i + 1])
            assert b["meta"][i] == rec["meta"]
            sysb = b["system"]
            assert bool(sysb["present"][i]) == (rec["system"] is not None)
            if rec["system"] is not None:
                assert sysb["meta"][i] == rec["system"]["meta"]
                for name, block in rec["system"]["blocks"].items():
                    sb = sysb["blocks"][name]
                    s0, s1 = int(sb["offsets"][i]), int(sb["offsets"][i + 1])
                    assert s1 - s0 == block["count"] == sb["count"][i]
                    for col, values in block["columns"].items():
                        np.testing.assert_array_equal(sb["columns"][col][s0:s1], values)
                        if col in block["validity"]:
                            np.testing.assert_array_equal(
                                sb["validity"][col][s0:s1], block["validity"][col]
                            )
            rt = rec["trajectory"]
            if rt is None:
                assert hi == lo
                continue
            assert hi - lo == rt["n_frames"], case["id"]
            np.testing.assert_array_equal(t["step"][lo:hi], rt["step"])
            for key, values in rt["meta"].items():
                if isinstance(values, list):
                    assert t["meta"][key][lo:hi] == values
                else:
                    np.testing.assert_array_equal(t["meta"][key][lo:hi], values)
            for name, block in rt["blocks"].items():
                bb = t["blocks"][name]
                np.testing.assert_array_equal(bb["present"][lo:hi], block["present"])
                np.testing.assert_array_equal(bb["count"][lo:hi], block["count"])
                r0, r1 = int(bb["offsets"][lo]), int(bb["offsets"][hi])
                for col, values in block["columns"].items():
                    flat = values.reshape((-1,) + values.shape[2:]) if "offsets" not in block else values
                    np.testing.assert_array_equal(bb["columns"][col][r0:r1], flat, err_msg=f"{case['id']} {name}.{col}")
            if rt["cell"] is not None:
                np.testing.assert_array_equal(t["cell"]["vectors"][lo:hi], rt["cell"]["vectors"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_python_writer_without_a_schema_keeps_every_record(
    case: Dict[str, Any], mrec_cli: str, tmp_path: Path
) -> None:
    """Without `schema` the declaration is derived; fills, precisions and
    `aligned_with` (which only a schema states) may differ, the records
    may not."""
    fixture = json.loads((FIXTURES / case["fixture"]).read_text())
    json_keys = {k for k, e in fixture.get("sequence_schema", {}).get("meta", {}).items() if e.get("dtype") == "json"}
    frames = [f for r in fixture["records"] for f in (r.get("trajectory") or {}).get("frames", [])]
    if any(isinstance(f.get("meta", {}).get(k), str) for f in frames for k in json_keys):
        pytest.skip("a json-tagged per-step string infers `string`: only a schema states `json`")
    path = tmp_path / "c.mrec.lmdb"
    write_with_cli(mrec_cli, FIXTURES / case["fixture"], path)
    c = mrec.open(path)
    meta = dict(c.meta)
    units = meta.pop("units")
    copy = tmp_path / "copy.mrec.lmdb"
    with mrec.Writer(copy, units=units, meta=meta, forcefield=c.forcefield) as w:
        for r in range(len(c)):
            w.append(c[r])
        w.finish(index=c.own_index(), validity=c.index_validity, precision=c.index_precision)
    same(dump_with_cli(mrec_cli, copy)["records"], dump_with_cli(mrec_cli, path)["records"], "records")
