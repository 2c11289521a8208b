"""``mrec.ray`` on a local Ray (``ray.init(num_cpus=2)``): ASE-LMDB shards
written by ase-db-backends imported through Ray equal the serial ``mrec
import aselmdb`` record for record; a set read through Ray equals
``mrec.open`` of it; a write task or an import task that fails mid-shard
leaves no manifest and no shard, and a rerun completes; shards whose
declarations differ, and a shard missing since the manifest, are refused
naming the shard; record rows of an imported set written back are the
same set."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason='needs Ray Data (pip install "mrec[ray]": ray[data] and pyarrow)')
pytest.importorskip("pyarrow", reason='needs pyarrow (pip install "mrec[ray]")')
ase = pytest.importorskip("ase", reason="needs ase (pip install ase)")
pytest.importorskip("ase_db_backends", reason="needs ase-db-backends (pip install ase-db-backends)")

import ase.db  # noqa: E402
from ase.build import bulk, molecule  # noqa: E402
from ase.calculators.singlepoint import SinglePointCalculator  # noqa: E402
from ase.constraints import FixAtoms, FixCartesian  # noqa: E402

import mrec  # noqa: E402
import mrec.ray  # noqa: E402
import workers  # noqa: E402
from conftest import dump_with_cli, record_json, same  # noqa: E402
from ray.data import DataContext  # noqa: E402

MOLECULES = ["H2O", "CH4", "NH3", "C6H6", "CO2", "CH3OH"]

# Ray's DataContext warns of its own deprecated settings when it is copied.
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated.*:DeprecationWarning:ray.data.context")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ctx = DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


def write_aselmdb(path: Path, n: int, seed: int, bad_key: int = 0) -> None:
    """An ASE-LMDB shard of ``n`` molecules with energies and forces,
    written by ase-db-backends; ``bad_key``: that row's value replaced by
    bytes that are not zlib (a shard that fails mid-way)."""
    rng = np.random.default_rng(seed)
    with ase.db.connect(path, type="aselmdb", append=False) as db:
        for i in range(n):
            a = molecule(MOLECULES[i % len(MOLECULES)])
            a.positions = a.positions + rng.normal(scale=0.05, size=a.positions.shape)
            a.calc = SinglePointCalculator(a, energy=float(rng.normal()), forces=rng.normal(size=(len(a), 3)))
            db.write(a, key_value_pairs={"sid": int(seed * 1000 + i)})
    if bad_key:
        import lmdb

        env = lmdb.open(str(path), subdir=False, lock=False)
        with env.begin(write=True) as txn:
            txn.put(str(bad_key).encode(), b"not zlib at all")
        env.close()


def write_mixed_aselmdb(path: Path, n: int = 12) -> None:
    """An ASE-LMDB shard whose rows hold different things: crystals with a
    cell and molecules without; calculators with or without stress,
    dipole, charges, collinear or non-collinear moments, per-atom
    energies; initial charges, tags, fixed atoms and axes, initial moments
    and momenta on some rows only. ``sid`` groups the crystals (a constant
    topology) and the molecules (water and methane in turn)."""
    rng = np.random.default_rng(7)
    with ase.db.connect(path, type="aselmdb", append=False) as db:
        for i in range(n):
            a = bulk("NaCl", "rocksalt", a=5.64) if i % 3 == 0 else molecule(["H2O", "CH4"][i % 2])
            k = len(a)
            results = {"energy": float(rng.normal()), "forces": rng.normal(size=(k, 3))}
            if i % 3 == 0:
                results["stress"] = rng.normal(size=6)
            if i % 4 == 1:
                results.update(dipole=rng.normal(size=3), charges=rng.normal(size=k))
            if i % 5 == 2:
                results.update(magmoms=rng.normal(size=(k, 3) if i % 2 else k), energies=rng.normal(size=k))
            if i % 4 == 3:
                a.set_initial_charges(rng.normal(size=k))
                a.set_tags(np.arange(k))
                a.set_constraint([FixAtoms(indices=[0]), FixCartesian(k - 1, mask=(True, False, True))])
            if i % 6 == 5:
                a.set_initial_magnetic_moments(rng.normal(size=k))
                a.set_momenta(rng.normal(size=(k, 3)))
            a.calc = SinglePointCalculator(a, **results)
            db.write(a, key_value_pairs={"sid": 0 if i % 3 == 0 else 1})


@pytest.fixture(scope="module")
def aselmdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("aselmdb")
    for k, n in enumerate([30, 17, 45, 8]):
        write_aselmdb(d / f"data{k:04d}.aselmdb", n, seed=k + 1)
    return d


def copy_sources(src: Path, dst: Path) -> Path:
    """``src``'s ASE-LMDB shards copied into the new directory ``dst``."""
    dst.mkdir()
    for p in src.glob("*.aselmdb"):
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def same_records(a: Dict[str, Any], b: Dict[str, Any]) -> None:
    assert len(a["records"]) == len(b["records"])
    for i, (x, y) in enumerate(zip(a["records"], b["records"])):
        assert x == y, f"record {i}"


def test_import_through_ray_equals_the_serial_import(local_ray: None, aselmdb_dir: Path, tmp_path: Path, mrec_cli: str) -> None:
    out = tmp_path / "set"
    report = mrec.ray.import_ase(aselmdb_dir, out)
    assert (report.rows, report.records, report.frames) == (100, 100, 100)
    assert "data0002.aselmdb" in str(report)
    manifest = json.loads((out / "mrec-set.json").read_text())
    assert [s["file"] for s in manifest["shards"]] == [f"data{k:04d}.mrec.lmdb" for k in range(4)]
    assert [s["n_records"] for s in manifest["shards"]] == [30, 17, 45, 8]
    serial = tmp_path / "serial.mrec.lmdb"
    shards = sorted(str(p) for p in aselmdb_dir.glob("*.aselmdb"))
    subprocess.run([mrec_cli, "import", "aselmdb", "--quiet", *shards, str(serial)], check=True)
    via_ray, one = dump_with_cli(mrec_cli, out), dump_with_cli(mrec_cli, serial)
    same_records(via_ray, one)
    assert via_ray["sequence_schema"] == one["sequence_schema"]
    assert via_ray["meta"]["units"] == one["meta"]["units"]
    # Python opens the set alike, and so does mrec info.
    s = mrec.open(out)
    assert (len(s), s.n_shards) == (100, 4)
    done = subprocess.run([mrec_cli, "info", str(out)], check=True, capture_output=True, text=True)
    assert "4 shards" in done.stdout and "records       100" in done.stdout


def test_read_through_ray_equals_mrec_open(local_ray: None, aselmdb_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "set"
    mrec.ray.import_ase(aselmdb_dir, out)
    s = mrec.open(out)
    rows = mrec.ray.read(out, unit="record", override_num_blocks=3).take_all()
    assert [r["record"] for r in rows] == list(range(len(s)))
    for row in rows:
        want = s[row["record"]]
        assert json.loads(row["meta"]) == want["meta"]
        t = want["trajectory"]
        assert list(row["step"]) == list(t["step"])
        np.testing.assert_array_equal(np.asarray(row["meta.pe"]), t["meta"]["pe"])
        for col in ("x", "fx"):
            got = np.concatenate([np.asarray(f) for f in row[f"atoms.{col}"]])
            np.testing.assert_array_equal(got, t["blocks"]["atoms"]["columns"][col].reshape(-1))
        system = want["system"]["blocks"]["atoms"]["columns"]
        assert list(row["system.atoms.element"]) == list(system["element"])
    st = mrec.Structures(out)
    frames = mrec.ray.read(out, unit="frame", override_num_blocks=5).take_all()
    assert [f["index"] for f in frames] == list(range(len(st)))
    want = st.batch(range(len(st)))
    starts = np.concatenate([[0], np.cumsum(want["natoms"])])
    for f in frames:
        i = f["index"]
        assert (f["record"], f["frame"]) == (want["record"][i], want["frame"][i])
        pos = np.asarray([np.asarray(p) for p in f["pos"]])
        np.testing.assert_array_equal(pos, want["pos"][starts[i] : starts[i + 1]])
        np.testing.assert_array_equal(np.asarray(f["atomic_numbers"]), want["atomic_numbers"][starts[i] : starts[i + 1]])
        assert f["energy"] == want["energy"][i]


@pytest.mark.parametrize("group_by", [None, "sid"])
def test_record_rows_of_an_imported_set_written_back_are_the_same_set(
    local_ray: None, aselmdb_dir: Path, tmp_path: Path, group_by: Any
) -> None:
    """docs/scale.md's re-shard: a set imported from ASE-LMDB, read as
    record rows, repartitioned and written with ``like=`` the set, equals
    it record for record (vector per-step keys, columns and cells some
    records lack, masks within a grouped record)."""
    sources = tmp_path / "sources"
    if group_by is None:
        copy_sources(aselmdb_dir, sources)
    else:
        sources.mkdir()
    write_mixed_aselmdb(sources / "mixed.aselmdb")
    imported = tmp_path / "imported"
    mrec.ray.import_ase(sources, imported, group_by=group_by)
    rows = mrec.ray.read(imported, unit="record", override_num_blocks=3).repartition(2)
    resharded = tmp_path / "resharded"
    mrec.ray.write(rows, resharded, like=imported)
    want, got = mrec.open(imported), mrec.open(resharded)
    assert got.n_shards == 2 and len(got) == len(want) == (112 if group_by is None else 2)
    assert got.schema == want.schema
    for r in range(len(want)):
        same(record_json(got[r]), record_json(want[r]), f"record {r}")


def leftovers(out: Path) -> List[str]:
    """What a directory holds besides LMDB lock files."""
    return sorted(p.name for p in out.iterdir() if not p.name.endswith("-lock")) if out.exists() else []


def test_a_write_task_that_fails_mid_shard_leaves_no_set_and_a_rerun_completes(local_ray: None, tmp_path: Path) -> None:
    whole = tmp_path / "whole.mrec.lmdb"
    workers.make_collection(whole, 60)
    c = mrec.open(whole)
    out = tmp_path / "out"
    ds = mrec.ray.read(whole, override_num_blocks=4)
    with pytest.raises(Exception, match="injected"):
        mrec.ray.write(ds, out, like=whole, _fail_after=5)
    assert leftovers(out) == [], "no manifest, no shard, no partial file, no marker"
    with pytest.raises(mrec.SetRefused) as e:
        mrec.open(out)
    assert e.value.problem == "empty"
    manifest = mrec.ray.write(ds, out, like=whole)
    assert Path(manifest) == out / "mrec-set.json"
    s = mrec.open(out)
    assert s.n_shards >= 2 and len(s) == len(c)
    for r in range(len(c)):
        assert workers.digest(s[r]) == workers.digest(c[r]), r
    with pytest.raises(FileExistsError):
        mrec.ray.write(ds, out, like=whole)


def test_an_import_task_that_fails_mid_shard_leaves_no_set_and_a_rerun_completes(
    local_ray: None, aselmdb_dir: Path, tmp_path: Path
) -> None:
    sources = copy_sources(aselmdb_dir, tmp_path / "sources")
    write_aselmdb(sources / "data0009.aselmdb", 20, seed=9, bad_key=12)
    out = tmp_path / "set"
    with pytest.raises(mrec.BadInput, match='data0009.aselmdb: key "12"'):
        mrec.ray.import_ase(sources, out)
    assert leftovers(out) == []
    write_aselmdb(sources / "data0009.aselmdb", 20, seed=9)
    report = mrec.ray.import_ase(sources, out)
    assert report.records == 120
    assert len(mrec.open(out)) == 120


def test_an_overwrite_leaves_the_previous_set_whole_until_its_manifest_replaces_it(
    local_ray: None, aselmdb_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "set"
    mrec.ray.import_ase(aselmdb_dir, out)
    manifest = (out / "mrec-set.json").read_bytes()
    before = [record_json(r) for r in mrec.open(out)]
    bad = tmp_path / "bad"
    bad.mkdir()
    write_aselmdb(bad / "data0001.aselmdb", 5, seed=5)
    write_aselmdb(bad / "data0002.aselmdb", 4, seed=7, bad_key=2)
    with pytest.raises(mrec.BadInput):
        mrec.ray.import_ase(bad, out, overwrite=True)
    assert (out / "mrec-set.json").read_bytes() == manifest
    assert leftovers(out) == ["data0000.mrec.lmdb", "data0001.mrec.lmdb", "data0002.mrec.lmdb", "data0003.mrec.lmdb", "mrec-set.json"]
    same([record_json(r) for r in mrec.open(out)], before)
    # A new set in its place: a shard of the old one that it does not
    # list goes, one it lists by the same name is replaced.
    (bad / "data0002.aselmdb").unlink()
    mrec.ray.import_ase(bad, out, overwrite=True)
    assert leftovers(out) == ["data0001.mrec.lmdb", "mrec-set.json"]
    assert len(mrec.open(out)) == 5


def test_failed_import_jobs_stop_their_running_tasks_and_end_cleanly_round_after_round(
    local_ray: None, aselmdb_dir: Path, tmp_path: Path
) -> None:
    # The bad source sorts first, so that it fails while the others run:
    # the job must stop them and wait for them before it cleans up. (Ray's
    # own ray.cancel of a task whose reply was in flight ended the driver
    # here, about once in a hundred such rounds.)
    sources = copy_sources(aselmdb_dir, tmp_path / "sources")
    write_aselmdb(sources / "a-bad.aselmdb", 4, seed=7, bad_key=2)
    out = tmp_path / "set"
    for round_ in range(25):
        with pytest.raises(mrec.BadInput, match='a-bad.aselmdb: key "2"'):
            mrec.ray.import_ase(sources, out)
        assert leftovers(out) == [], f"round {round_}"


def test_an_import_task_of_a_stopped_job_does_nothing(aselmdb_dir: Path, tmp_path: Path) -> None:
    from mrec import _ray_io

    stop = tmp_path / "mrec-set.job.stop"
    stop.touch()
    out = tmp_path / "data0000.mrec.lmdb"
    options = {"group_by": None, "order_by": None, "index_columns": [], "skip_bad": False, "threads": 1, "format": None, "job": "job"}
    assert _ray_io.import_one(str(aselmdb_dir / "data0000.aselmdb"), str(out), {**options, "stop": str(stop)}) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [stop.name]
    stop.unlink()
    report = _ray_io.import_one(str(aselmdb_dir / "data0000.aselmdb"), str(out), {**options, "stop": str(stop)})
    assert report is not None and report["records"] == 30
    # Written under the attempt's own name, for the driver to install.
    attempt = Path(report["file"])
    assert attempt.parent == tmp_path and attempt.name.startswith(".job.") and attempt.name.endswith(".data0000.mrec.lmdb")
    assert len(mrec.open(attempt)) == 30 and not out.exists()
    assert "into data0000.mrec.lmdb:" in report["text"]


def test_a_stop_watch_interrupts_the_main_thread_once_its_file_appears_and_never_once_closed(
    tmp_path: Path, ctrl_c: Any
) -> None:
    import time

    from mrec._ray_io import _StopWatch

    stop = tmp_path / "stop"
    watch = _StopWatch(str(stop), period=0.01)
    with pytest.raises(KeyboardInterrupt):
        try:
            stop.touch()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.001)
        finally:
            watch.close()
    assert watch.fired
    closed = _StopWatch(str(stop) + ".other", period=0.01)
    closed.close()
    Path(str(stop) + ".other").touch()
    time.sleep(0.1)
    assert not closed.fired


def test_shards_that_do_not_form_a_set_are_refused_naming_the_shard(local_ray: None, aselmdb_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "set"
    mrec.ray.import_ase(aselmdb_dir, out)
    (out / "data0001.mrec.lmdb").unlink()
    with pytest.raises(mrec.SetRefused) as e:
        mrec.ray.read(out)
    assert (e.value.problem, e.value.shard) == ("missing", "data0001.mrec.lmdb")
    # Grouped rows declare the per-step `ase` document: another declaration.
    mixed = tmp_path / "mixed"
    mrec.ray.import_ase(aselmdb_dir / "data0000.aselmdb", mixed)
    mrec.ray.import_ase(aselmdb_dir / "data0003.aselmdb", tmp_path / "grouped", group_by="sid")
    (mixed / "mrec-set.json").unlink()
    os.replace(tmp_path / "grouped" / "data0003.mrec.lmdb", mixed / "data0003.mrec.lmdb")
    with pytest.raises(mrec.SetRefused) as e:
        mrec.ray.read(mixed)
    assert (e.value.problem, e.value.shard) == ("declaration", "data0003.mrec.lmdb")
    assert "sequence_schema" in str(e.value)


def test_the_tasks_hand_their_shards_digests_to_the_manifest(
    local_ray: None, aselmdb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each import and write task hashes the shard it wrote; the driver
    writes those digests into the manifest (it hashes none itself), and
    the set verifies."""
    import mrec._ray_io as ray_io

    handed: List[Any] = []
    finish_set = ray_io.finish_set

    def recording(out_dir: str, job: str, shards: Any, digests: Any = None) -> str:
        handed.append(list(digests) if digests is not None else None)
        return finish_set(out_dir, job, shards, digests)

    monkeypatch.setattr(ray_io, "finish_set", recording)
    out = tmp_path / "imported"
    mrec.ray.import_ase(aselmdb_dir, out)
    whole = tmp_path / "whole.mrec.lmdb"
    workers.make_collection(whole, 30)
    written = tmp_path / "written"
    mrec.ray.write(mrec.ray.read(whole, override_num_blocks=3), written, like=whole)
    assert len(handed) == 2
    for out_dir, digests in zip((out, written), handed):
        manifest = json.loads((out_dir / "mrec-set.json").read_text())
        files = [out_dir / s["file"] for s in manifest["shards"]]
        assert digests == [s["xxh3_128"] for s in manifest["shards"]]
        assert digests == [mrec._native.file_digest(str(f)) for f in files]
        assert len(mrec.open(out_dir, verify=True)) == sum(s["n_records"] for s in manifest["shards"])
