"""Frames by global ordinal (`Collection.frames`, `Collection.frame`):
every frame of every positive suite fixture, asked for in a shuffled order
in one call and one by one, is that frame of its record read whole (`c[r]`)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import mrec
import workers
from conftest import FIXTURES, positive_cases, record_json, same, trajectory_json, write_with_cli

CASES = positive_cases()


def without_padding(got: Dict[str, Any], want: Dict[str, Any]) -> Dict[str, Any]:
    """`got` (a frame of a call over several records) without the columns
    its record lacks: the flat layout holds, for those, rows marked
    invalid (as `batch` does), and for a trajectory without times, time
    NaN; asserted so, then dropped."""
    if "time" in got and "time" not in want:
        assert got.pop("time") == "NaN"
    for name, block in got.get("blocks", {}).items():
        theirs = want.get("blocks", {}).get(name, {}).get("columns", {})
        for col in [c for c in block["columns"] if c not in theirs]:
            validity = block["columns"][col].get("validity")
            assert validity is not None and not any(validity), f"{name}.{col} padded but valid"
            del block["columns"][col]
    return got


def record_frames(c: mrec.Collection) -> List[Dict[str, Any]]:
    """Every frame of the collection, in ordinal order, as canonical JSON
    read from whole records."""
    out = []
    for r in range(len(c)):
        t = c[r]["trajectory"]
        if t is not None:
            out.extend(trajectory_json(t)["frames"])
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_frame_by_ordinal_is_that_frame_of_its_record(
    mrec_cli: str, tmp_path: Path, case: Dict[str, Any]
) -> None:
    path = tmp_path / "c.mrec.lmdb"
    write_with_cli(mrec_cli, FIXTURES / case["fixture"], path)
    c = mrec.open(path)
    want = record_frames(c)
    assert len(want) == c.n_frames
    if not want:
        return
    order = list(range(c.n_frames))
    random.Random(len(order)).shuffle(order)
    got = c.frames(order)
    assert list(got["frames"]) == order
    frames = trajectory_json(got["trajectory"])["frames"]
    first = c.index["first_frame"]
    for i, j in enumerate(order):
        same(without_padding(frames[i], want[j]), want[j], f"{case['id']}: frame {j}")
        r, k = int(got["record"][i]), int(got["position"][i])
        assert first[r] + k == j and c.locate(j) == (r, k)
    for j in (0, c.n_frames - 1, -1):
        one = c.frame(j)
        same(trajectory_json(one["trajectory"])["frames"][0], want[j], f"frame({j})")
        r = int(one["record"][0])
        assert one["meta"][0] == c[r]["meta"]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("frames") / "synthetic.mrec.lmdb"
    workers.make_collection(path, 60)
    return path


def test_frames_with_systems_hold_each_record_once(synthetic: Path) -> None:
    c = mrec.open(synthetic)
    js = [5, 0, 6, 40, 1, 2]
    got = c.frames(js, system=True)
    records = [int(r) for r in got["record"]]
    unique = list(dict.fromkeys(records))
    assert [unique[i] for i in got["system_index"]] == records
    batch = c.batch(unique)["system"]
    sys = got["system"]
    assert sys["meta"] == batch["meta"]
    for col in ("element", "atomic_number"):
        np.testing.assert_array_equal(sys["blocks"]["atoms"]["columns"][col], batch["blocks"]["atoms"]["columns"][col])
    np.testing.assert_array_equal(sys["blocks"]["atoms"]["offsets"], batch["blocks"]["atoms"]["offsets"])
    assert "system" not in c.frames(js)


def test_a_frame_out_of_range_is_an_index_error(synthetic: Path) -> None:
    c = mrec.open(synthetic)
    n = c.n_frames
    with pytest.raises(IndexError, match=f"frame {n} out of range: the collection has {n} frames"):
        c.frames([0, n])
    with pytest.raises(IndexError):
        c.frame(-n - 1)
    with pytest.raises(IndexError):
        c.locate(n)
    assert c.frames([-1])["frames"][0] == n - 1


def test_records_read_whole_are_unchanged_by_frames_read_before(synthetic: Path) -> None:
    """The reader's record entries (kept for frames) change nothing that
    `c[r]` or `c.batch` reads."""
    c = mrec.open(synthetic)
    before = [record_json(c[r]) for r in range(len(c))]
    c.frames(list(range(c.n_frames)), system=True)
    for r in range(len(c)):
        same(record_json(c[r]), before[r], f"record {r}")


def test_a_forked_child_reads_frames_after_its_parent_did(synthetic: Path) -> None:
    """The parent's reader holds its own transaction for frames; a forked
    child drops the inherited reader and opens the file afresh."""
    import os

    c = mrec.open(synthetic)
    js = list(range(0, c.n_frames, 7))
    want = c.frames(js)["trajectory"]["blocks"]["atoms"]["columns"]["x"].tobytes()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status
        status = 0
        try:
            got = c.frames(js)["trajectory"]["blocks"]["atoms"]["columns"]["x"].tobytes()
            status |= 0 if got == want else 1
            again = mrec.open(synthetic).frames(js[:3])
            status |= 0 if len(again["frames"]) == 3 else 2
        except BaseException:
            status |= 4
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, os.WEXITSTATUS(status)
    assert c.frames(js)["trajectory"]["blocks"]["atoms"]["columns"]["x"].tobytes() == want
