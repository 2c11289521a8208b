"""Refusals, uncommitted and busy files, operating-system errors and panics
reach Python as exceptions of their own types, subclasses of built-ins."""

from __future__ import annotations

import copy
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec import _native
from conftest import FIXTURES, write_with_cli

UNITS = {"length": "angstrom", "energy": "kcal/mol"}


@pytest.fixture()
def water(mrec_cli: str, tmp_path: Path) -> Path:
    path = tmp_path / "water.mrec.lmdb"
    write_with_cli(mrec_cli, FIXTURES / "examples" / "water-and-ammonia.json", path)
    return path


def test_exception_types_subclass_builtins() -> None:
    assert issubclass(mrec.Refused, ValueError)
    assert issubclass(mrec.Uncommitted, mrec.Refused)
    assert issubclass(mrec.Busy, mrec.Refused)
    assert issubclass(mrec.LmdbError, RuntimeError)
    assert issubclass(mrec.InternalError, RuntimeError)
    assert mrec.Uncommitted is not mrec.Busy


def test_exceptions_pickle_with_their_fields() -> None:
    e = mrec.Refused("[x.y] at: no", "x.y", "records[1]", "/tmp/f", "no")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is mrec.Refused
    assert (back.clause, back.path, back.file, back.detail, str(back)) == (
        "x.y",
        "records[1]",
        "/tmp/f",
        "no",
        "[x.y] at: no",
    )
    busy = pickle.loads(pickle.dumps(mrec.Busy("b", "lmdb.file.one-writer", "", "/p", "held")))
    assert type(busy) is mrec.Busy and busy.clause == "lmdb.file.one-writer"


def test_a_collection_without_units_is_refused(tmp_path: Path) -> None:
    with pytest.raises(mrec.Refused) as info:
        mrec.Writer(tmp_path / "x.mrec.lmdb", units=None)
    assert info.value.clause == "collection.meta.units-required"
    assert isinstance(info.value, ValueError)
    assert not (tmp_path / "x.mrec.lmdb").exists()


def test_a_refused_record_leaves_the_writer_usable(water: Path, tmp_path: Path) -> None:
    c = mrec.open(water)
    good = c[0]
    bad = copy.deepcopy(good)
    bad["trajectory"]["step"] = np.array([0, 2, 1], dtype=np.int64)
    out = tmp_path / "out.mrec.lmdb"
    with mrec.Writer(out, units=c.units, schema=c.schema) as w:
        with pytest.raises(mrec.Refused) as info:
            w.append(bad)
        assert info.value.clause == "trajectory.step.increasing"
        assert info.value.path.startswith("records[0].trajectory"), info.value.path
        assert info.value.file == str(out)
        assert w.records == 0
        w.append(good)
        # x as i64 where the given declaration says f64.
        wrong = copy.deepcopy(good)
        atoms = wrong["trajectory"]["blocks"]["atoms"]["columns"]
        atoms["x"] = atoms["x"].astype(np.int64)
        with pytest.raises(mrec.Refused) as info:
            w.append(wrong)
        assert info.value.clause == "collection.schema.record-subset"
        w.append(good)
    back = mrec.open(out)
    assert len(back) == 2
    np.testing.assert_array_equal(
        back[1]["trajectory"]["blocks"]["atoms"]["columns"]["x"],
        good["trajectory"]["blocks"]["atoms"]["columns"]["x"],
    )


def test_a_canonical_column_of_another_dtype_is_refused(water: Path, tmp_path: Path) -> None:
    c = mrec.open(water)
    wrong = c[0]
    atoms = wrong["trajectory"]["blocks"]["atoms"]["columns"]
    atoms["x"] = atoms["x"].astype(np.int64)  # x is f64 wherever it appears
    with mrec.Writer(tmp_path / "o.mrec.lmdb", units=c.units) as w:
        with pytest.raises(mrec.Refused) as info:
            w.append(wrong)
        assert info.value.clause == "column.dtype.canonical"


def test_an_empty_file_is_uncommitted(tmp_path: Path) -> None:
    path = tmp_path / "empty.mrec.lmdb"
    path.write_bytes(b"")
    with pytest.raises(mrec.Uncommitted) as info:
        mrec.open(path)
    assert info.value.clause == "lmdb.meta.required"
    assert info.value.file == str(path)


def test_an_lmdb_file_without_meta_is_uncommitted(water: Path, tmp_path: Path) -> None:
    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "no-meta.mrec.lmdb"
    shutil.copy(water, path)
    env = lmdb.open(str(path), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        assert txn.delete(b"meta")
    env.close()
    with pytest.raises(mrec.Uncommitted):
        mrec.open(path)


def test_a_meta_that_is_not_an_object_is_refused(water: Path, tmp_path: Path) -> None:
    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "bad-meta.mrec.lmdb"
    shutil.copy(water, path)
    env = lmdb.open(str(path), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        txn.put(b"meta", b"[]")
    env.close()
    with pytest.raises(mrec.Refused) as info:
        mrec.open(path)
    assert info.value.clause == "lmdb.meta.well-formed"
    assert type(info.value) is mrec.Refused


def test_a_second_writer_of_a_path_is_busy(tmp_path: Path) -> None:
    path = tmp_path / "busy.mrec.lmdb"
    first = mrec.Writer(path, units=UNITS)
    try:
        with pytest.raises(mrec.Busy) as info:
            mrec.Writer(path, units=UNITS)
        assert info.value.clause == "lmdb.file.one-writer"
        assert isinstance(info.value, ValueError)
    finally:
        first.close()
    # Once the first writer is gone, the path can be written.
    with mrec.Writer(path, units=UNITS):
        pass
    assert len(mrec.open(path)) == 0


def test_a_truncated_copy_is_refused(water: Path, tmp_path: Path) -> None:
    path = tmp_path / "short.mrec.lmdb"
    data = water.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(mrec.Refused) as info:
        mrec.open(path)
    assert info.value.clause == "lmdb.file.complete"
    with pytest.raises(mrec.Refused) as info:
        mrec.open(path, checked=True)
    assert info.value.clause in ("lmdb.file.pages", "lmdb.file.complete")


def test_garbage_is_refused_when_checked(tmp_path: Path) -> None:
    path = tmp_path / "garbage.mrec.lmdb"
    path.write_bytes(bytes(range(256)) * 512)
    with pytest.raises(mrec.Refused) as info:
        mrec.open(path, checked=True)
    assert info.value.clause is not None and info.value.clause.startswith("lmdb.file")


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        mrec.open(tmp_path / "nothing.mrec.lmdb")


def test_an_existing_file_is_not_overwritten_unless_asked(water: Path) -> None:
    before = water.read_bytes()
    with pytest.raises((mrec.Refused, OSError)):
        mrec.Writer(water, units=UNITS)
    assert water.read_bytes() == before
    with mrec.Writer(water, units=UNITS, overwrite=True):
        pass
    assert len(mrec.open(water)) == 0


def test_record_indices_out_of_range_are_index_errors(water: Path) -> None:
    c = mrec.open(water)
    assert c[-1]["meta"] == c[len(c) - 1]["meta"]
    with pytest.raises(IndexError):
        c[len(c)]
    with pytest.raises(IndexError):
        c.batch([0, len(c)])


@pytest.mark.parametrize("detached", [False, True])
def test_a_panic_is_an_internal_error(detached: bool) -> None:
    with pytest.raises(mrec.InternalError) as info:
        _native._panic_for_test(detached)
    assert "test panic" in str(info.value)
    # A RuntimeError, so `except Exception` sees it (PyO3's PanicException
    # is a BaseException).
    assert isinstance(info.value, Exception)


def test_a_finished_writer_refuses_more(tmp_path: Path) -> None:
    w = mrec.Writer(tmp_path / "f.mrec.lmdb", units=UNITS)
    w.finish()
    with pytest.raises(ValueError):
        w.append(meta={}, system={"blocks": {}})
    assert w.closed


def test_a_file_on_a_read_only_mount_opens_lock_free(water: Path, tmp_path: Path) -> None:
    """The library's fallback: no lock file can be made, the file opens
    without one. Needs a private mount namespace (`unshare -m`, root)."""
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(water, ro / "w.mrec.lmdb")
    script = (
        "import mrec; c = mrec.open('{p}'); "
        "print(len(c), c.lock_free, c[0]['meta']['name'])".format(p=ro / "w.mrec.lmdb")
    )
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro}"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"no private read-only mount here: {probe.stderr.decode().strip()}")
    done = subprocess.run(
        [
            "unshare", "-m", "sh", "-c",
            f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro} && exec \"$0\" -c \"$1\"",
            sys.executable, script,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "True", "water"]
    assert not (ro / "w.mrec.lmdb-lock").exists()


def test_a_damaged_frame_refuses_its_record_only(water: Path, tmp_path: Path) -> None:
    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "bad-frame.mrec.lmdb"
    shutil.copy(water, path)
    env = lmdb.open(str(path), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        key = b"f" + (1).to_bytes(8, "big")  # record 0's second frame
        assert txn.get(key) is not None
        txn.put(key, b"MRF1 not a frame")
    env.close()
    c = mrec.open(path)
    with pytest.raises(mrec.Refused) as info:
        c[0]
    assert info.value.path.startswith("records[0]"), info.value.path
    assert info.value.clause is not None
    with pytest.raises(mrec.Refused) as again:
        c.batch([1, 0])
    assert again.value.clause == info.value.clause
    assert c[1]["meta"]["name"] == "ammonia"  # other records still read
