"""`mrec.from_ase` and `python -m mrec import`: inputs written by ase
itself (extxyz, an ASE SQLite database), imported, and every frame read
back (through `mrec.to_ase` and through the Rust `mrec dump`) compared with
what ase reads from the source: positions, numbers, cell, pbc, energy and
forces, bit for bit. And the mapping is one: an `Atoms` imported through
Python and the same `Atoms` in an ASE-LMDB shard imported by `mrec import
aselmdb` give the same records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import mrec

from conftest import REPO, dump_with_cli

ase = pytest.importorskip("ase", reason="the importer's tests need ase (pip install ase)")
import ase.db  # noqa: E402
import ase.io  # noqa: E402
from ase.build import bulk, fcc111, molecule  # noqa: E402
from ase.calculators.singlepoint import SinglePointCalculator  # noqa: E402
from ase.constraints import FixAtoms  # noqa: E402

# fcc111's slabs carry `adsorbate_info`, which extxyz cannot write (ase warns).
pytestmark = pytest.mark.filterwarnings("ignore:Skipping unhashable information")

MOLECULES = ["H2O", "CH4", "NH3", "C6H6", "CO2"]


def structures(n: int = 200, seed: int = 7) -> List[Any]:
    """Molecules and periodic structures, with and without energies,
    forces, stress, charges, tags and fixed atoms; `info` carries a
    group (`system`, 8 structures of one topology each) and its `step`
    (in reverse order of appearance)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        group = i // 8
        kind = group % 4
        if kind == 0:
            a = molecule(MOLECULES[group % len(MOLECULES)])
        elif kind == 1:
            a = fcc111("Cu", size=(2, 2, 3), vacuum=6.0)
            a.set_constraint(FixAtoms(indices=[k for k, t in enumerate(a.get_tags()) if t == 3]))
        elif kind == 2:
            a = molecule("CH3OH")
            a.set_initial_charges(rng.normal(size=len(a)))
        else:
            a = bulk("Si", "diamond", a=5.43, cubic=True)
        a.positions = a.positions + rng.normal(scale=0.05, size=a.positions.shape)
        a.info["system"] = group
        a.info["step"] = 7 - i % 8
        a.info["config_type"] = ["molecule", "slab", "charged", "bulk"][kind]
        if i % 5 != 4:  # every fifth has no calculator results
            results: Dict[str, Any] = {"energy": float(rng.normal() * 10)}
            if kind != 2:
                results["forces"] = rng.normal(size=(len(a), 3))
            if kind == 3:
                results["stress"] = rng.normal(size=6)
            a.calc = SinglePointCalculator(a, **results)
        out.append(a)
    return out


def rust_frames(mrec_cli: str, path: Path) -> List[Dict[str, Any]]:
    """Every frame of a collection as the Rust reader dumps it: numbers,
    positions, cell, pbc, pe and forces (flat lists of floats)."""
    frames = []
    for rec in dump_with_cli(mrec_cli, path)["records"]:
        sys_cols = rec["system"]["blocks"]["atoms"]["columns"] if rec.get("system") else {}
        cols = dict(sys_cols)
        cell = None
        for fr in rec["trajectory"]["frames"]:
            cols.update(fr["blocks"]["atoms"]["columns"])
            cell = fr.get("box", cell)
            frames.append(
                {
                    "numbers": cols["atomic_number"]["values"],
                    "positions": np.stack([cols[k]["values"] for k in "xyz"], axis=-1),
                    "forces": np.stack([cols[k]["values"] for k in ("fx", "fy", "fz")], axis=-1)
                    if "fx" in cols
                    else None,
                    "cell": None if cell is None else np.asarray(cell["vectors"], dtype=float).T,
                    "pbc": None if cell is None else cell["boundary"],
                    "pe": fr["meta"]["pe"],
                }
            )
    return frames


def same_bits(a: Any, b: Any) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def assert_frame_equals_source(src: Any, back: Any, rust: Dict[str, Any]) -> None:
    """`back` (to_ase) and `rust` (mrec dump) hold what ase read as `src`."""
    assert list(back.numbers) == list(src.numbers) == list(rust["numbers"])
    assert same_bits(back.positions, src.positions)
    assert same_bits(rust["positions"], src.positions)
    assert same_bits(back.cell.array, src.cell.array)
    assert list(back.pbc) == list(src.pbc)
    if src.cell.any() or src.pbc.any():
        assert same_bits(rust["cell"], src.cell.array) and rust["pbc"] == list(src.pbc)
    else:
        assert rust["cell"] is None
    if src.calc is not None and "energy" in src.calc.results:
        assert back.get_potential_energy() == src.get_potential_energy() == rust["pe"]
    else:
        assert rust["pe"] == "NaN" and (back.calc is None or "energy" not in back.calc.results)
    if src.calc is not None and "forces" in src.calc.results:
        # As read, before FixAtoms zeroes the fixed atoms' forces.
        forces = src.get_forces(apply_constraint=False)
        assert same_bits(back.get_forces(apply_constraint=False), forces)
        assert same_bits(rust["forces"], forces)
    if src.calc is not None and "stress" in src.calc.results:
        assert same_bits(back.get_stress(), src.get_stress())


def check_against_source(mrec_cli: str, out: Path, source: List[Any]) -> None:
    c = mrec.open(out, checked=True)
    assert len(c) == len(source)
    rust = rust_frames(mrec_cli, out)
    assert len(rust) == len(source)
    for r, src in enumerate(source):
        assert_frame_equals_source(src, mrec.to_ase(c[r]), rust[r])


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrec", "import", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def extxyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("extxyz") / "mixed.extxyz"
    ase.io.write(path, structures(), format="extxyz")
    return path


def test_from_ase_of_an_extxyz_file_is_what_ase_reads(mrec_cli: str, extxyz: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.mrec.lmdb"
    report = mrec.from_ase(ase.io.iread(extxyz), out, index_columns=["config_type"])
    source = ase.io.read(extxyz, ":")
    assert (report.records, report.frames, report.rows_read) == (200, 200, 200)
    check_against_source(mrec_cli, out, source)
    c = mrec.open(out)
    assert c.units["length"] == "angstrom" and c.units["energy"] == "eV"
    assert c.meta["source"] == {"format": "ase", "sources": [{"name": "atoms", "rows": 200}]}
    # info's scalars are the record's key-value pairs; an own index column.
    assert c[9]["meta"]["key_value_pairs"] == {"system": 1, "step": 6, "config_type": "slab"}
    assert list(c.own_index()["config_type"][:9]) == ["molecule"] * 8 + ["slab"]
    # Fixed atoms and tags of the slabs, charges of the charged molecules.
    slab = c[8]["system"]["blocks"]["atoms"]["columns"]
    assert list(slab["fixed"]) == [bool(t == 3) for t in source[8].get_tags()]
    assert same_bits(c[16]["system"]["blocks"]["atoms"]["columns"]["charge"], source[16].get_initial_charges())


def test_python_m_mrec_import_groups_rows_into_trajectories(mrec_cli: str, extxyz: Path, tmp_path: Path) -> None:
    out = tmp_path / "g.mrec.lmdb"
    done = run_module(str(extxyz), str(out), "--group-by", "system", "--order-by", "step", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported 200 of 200 rows from 1 source(s) into g.mrec.lmdb: 25 records, 200 frames")
    source = ase.io.read(extxyz, ":")
    c = mrec.open(out, checked=True)
    assert len(c) == 25 and c.n_frames == 200
    rust = rust_frames(mrec_cli, out)
    k = 0
    for g in range(25):
        rec = c[g]
        assert list(rec["trajectory"]["step"]) == list(range(8))
        # Frame s of group g is the structure of step s: i = 8g + 7 - s.
        for s in range(8):
            i = 8 * g + 7 - s
            assert_frame_equals_source(source[i], mrec.to_ase(rec, s), rust[k])
            k += 1
        # One topology per group: numbers in the system.
        assert "atomic_number" in rec["system"]["blocks"]["atoms"]["columns"]


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ASE SQLite database of the structures, its `info` as key-value
    pairs and a `data` entry, some rows deleted."""
    path = tmp_path_factory.mktemp("db") / "mixed.db"
    with ase.db.connect(path, append=False) as db:
        for k, a in enumerate(structures(120, seed=11)):
            pairs = {key: a.info[key] for key in ("system", "step", "config_type")}
            a.info.clear()
            db.write(a, key_value_pairs=pairs, data={"origin": f"run-{k}"})
    ase.db.connect(path).delete([3, 50, 51])
    return path


def test_python_m_mrec_import_of_an_ase_database_keeps_its_pairs(
    mrec_cli: str, sqlite_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "db.mrec.lmdb"
    done = run_module(str(sqlite_db), str(out), "--quiet", "--index-column", "system")
    assert done.returncode == 0, done.stderr
    source = ase.io.read(sqlite_db, ":")
    assert len(source) == 117
    check_against_source(mrec_cli, out, source)
    c = mrec.open(out)
    rows = list(ase.db.connect(sqlite_db).select())
    for r in (0, 60, 116):
        meta = c[r]["meta"]
        assert meta["key_value_pairs"] == rows[r].key_value_pairs
        assert meta["data"] == {"origin": rows[r].data["origin"]}
        assert meta["unique_id"] == rows[r].unique_id
    assert list(c.own_index()["system"]) == [row.system for row in rows]


def test_both_paths_run_one_mapping(mrec_cli: str, tmp_path: Path) -> None:
    """The same Atoms through `from_ase` and through an ASE-LMDB shard
    written by ase-db-backends and `mrec import aselmdb` give the same
    records, and every entry of the mapping table is exercised."""
    pytest.importorskip("ase_db_backends", reason="needs ase-db-backends (pip install ase-db-backends)")
    images = structures(40, seed=3)
    for k, a in enumerate(images):  # what the table maps besides the above
        results = dict(a.calc.results) if a.calc is not None else None
        a.set_momenta(np.full((len(a), 3), 0.5 * k))
        a.set_tags(np.arange(len(a)))
        a.set_initial_magnetic_moments(np.linspace(0, 1, len(a)))
        a.set_masses(a.get_masses() * 1.001)
        if results is not None:
            results.update(
                forces=np.linspace(-1, 1, 3 * len(a)).reshape(-1, 3),
                free_energy=1.0 * k,
                magmom=0.5,
                dipole=np.array([0.1, 0.2, 0.3]),
                charges=np.linspace(-1, 1, len(a)),
                magmoms=np.linspace(1, 2, len(a)),
                energies=np.linspace(2, 3, len(a)),
                stress=np.arange(6.0) + k,
            )
            # Attached after the changes: ASE keeps results of this state only.
            a.calc = SinglePointCalculator(a, **results)
    shard = tmp_path / "same.aselmdb"
    with ase.db.connect(shard, type="aselmdb", append=False) as db:
        for a in images:
            pairs = {k: v for k, v in a.info.items() if isinstance(v, (int, float, str))}
            data = {k: v for k, v in a.info.items() if k not in pairs}
            db.write(a, key_value_pairs=pairs, data=data)
    seen = set()
    ignore = {"shard", "id", "ctime", "mtime", "user", "unique_id"}

    def plain(meta: Any) -> Any:
        return {k: v for k, v in meta.items() if k not in ignore} if isinstance(meta, dict) else meta

    for n_records, grouping in ((40, []), (5, ["--group-by", "system", "--order-by", "step"])):
        via_rust = tmp_path / "rust.mrec.lmdb"
        subprocess.run(
            [mrec_cli, "import", "aselmdb", "--quiet", "--overwrite", *grouping, str(shard), str(via_rust)],
            check=True,
        )
        via_python = tmp_path / "python.mrec.lmdb"
        keys = {"group_by": "system", "order_by": "step"} if grouping else {}
        mrec.from_ase(images, via_python, overwrite=True, **keys)
        rust, python = dump_with_cli(mrec_cli, via_rust), dump_with_cli(mrec_cli, via_python)
        assert len(rust["records"]) == len(python["records"]) == n_records
        for a, b in zip(rust["records"], python["records"]):
            for rec in (a, b):
                rec["meta"] = plain(rec["meta"])
                for fr in rec["trajectory"]["frames"]:
                    if "ase" in fr["meta"]:
                        fr["meta"]["ase"] = plain(fr["meta"]["ase"])
            assert a == b
        assert rust.get("sequence_schema") == python.get("sequence_schema")
        # Every column and per-step key of the table is in the records.
        for rec in python["records"]:
            for part in (rec.get("system") or {}, *rec["trajectory"]["frames"]):
                seen.update(f"atoms.{k}" for k in part.get("blocks", {}).get("atoms", {}).get("columns", {}))
                seen.update(f"step.meta.{k}" for k in part.get("meta", {}) if "step" in part)
                if "box" in part:
                    seen.add("box")
    wanted = set()
    for entry in mrec.ase_mapping()["mapping"]:
        target = entry["molrec"]
        if target.startswith("atoms.") and "," in target:  # "atoms.x, y, z"
            first = target.split(".", 1)[1]
            wanted.update(f"atoms.{c.strip()}" for c in first.split(","))
        elif target.startswith(("atoms.", "step.meta.")) or target == "box":
            wanted.add(target)
    missing = wanted - seen
    # Vector magnetic moments and FixCartesian are other shapes of keys
    # exercised above (scalar moments, FixAtoms).
    missing -= {"atoms.magmom_xyz", "atoms.initial_magmom_xyz", "atoms.fixed_cartesian"}
    assert not missing, f"mapping entries no record exercised: {sorted(missing)}"


def test_the_mapping_table_is_the_one_of_the_rust_importer() -> None:
    table = json.loads((REPO / "import" / "src" / "mapping.json").read_text())
    assert mrec.ase_mapping() == table
    assert table["units"]["length"] == "angstrom"


def test_bad_input_names_the_source_the_key_and_the_problem(tmp_path: Path) -> None:
    images = structures(6)
    out = tmp_path / "bad.mrec.lmdb"
    with pytest.raises(mrec.BadInput, match=r'source mine: key "4": not an ase.Atoms'):
        mrec.from_ase(images[:3] + ["not atoms"] + images[3:], out, name="mine")
    assert not out.exists()
    report = mrec.from_ase(images[:3] + ["not atoms"] + images[3:], out, name="mine", skip_bad=True)
    assert report.records == 6 and report.rows_read == 6
    assert report.dropped == {"structures ASE's encoder refused (not imported)": 1}
    assert 'key "4"' in report.dropped_samples[0]
    # A group key that a structure lacks is bad input from the Rust side.
    del images[2].info["system"]
    with pytest.raises(mrec.BadInput, match=r'source atoms: key "3": no key_value_pair or data scalar `system`'):
        mrec.from_ase(images, tmp_path / "g.mrec.lmdb", group_by="system")
    with pytest.raises(ValueError, match="order_by needs group_by"):
        mrec.from_ase(images, tmp_path / "o.mrec.lmdb", order_by="step")
    assert not any(p.name.endswith(".scratch.aselmdb") for p in tmp_path.iterdir())


def test_an_interrupted_import_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "i.mrec.lmdb"
    mrec.from_ase(structures(4), out)
    before = out.read_bytes()

    def interrupted() -> Any:
        yield from structures(5)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        mrec.from_ase(interrupted(), out, overwrite=True)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.mrec.lmdb"]


def test_the_module_exits_4_on_bad_input_3_on_io(tmp_path: Path) -> None:
    bad = tmp_path / "bad.extxyz"
    bad.write_text("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\n")  # truncated
    done = run_module(str(bad), str(tmp_path / "o.mrec.lmdb"), "--quiet")
    assert done.returncode == 4, done.stderr
    assert f'source {bad}: key "1": ase could not read it' in done.stderr
    assert not (tmp_path / "o.mrec.lmdb").exists()
    done = run_module(str(tmp_path / "missing.xyz"), str(tmp_path / "o.mrec.lmdb"), "--quiet")
    assert done.returncode == 3 and "missing.xyz" in done.stderr


def test_ctrl_c_while_python_reads(tmp_path: Path, ctrl_c: Any) -> None:
    """SIGINT to `python -m mrec import` while it reads a source (a FIFO
    that has delivered 100 structures and stays open): exit 130, the
    output as it was (absent), no scratch file left."""
    import signal
    import threading
    import time

    text = tmp_path / "part.extxyz"
    ase.io.write(text, structures(100), format="extxyz")
    fifo = tmp_path / "slow.extxyz"
    os.mkfifo(fifo)
    release = threading.Event()

    def feed() -> None:
        with open(fifo, "wb") as pipe:
            pipe.write(text.read_bytes())
            pipe.flush()
            release.wait(60)

    feeder = threading.Thread(target=feed)
    feeder.start()
    out = tmp_path / "c.mrec.lmdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mrec", "import", "--format", "extxyz", str(fifo), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c,
    )
    try:
        # Wait until the scratch shard exists: the import is reading.
        deadline = time.monotonic() + 60
        while not any(p.name.endswith(".scratch.aselmdb") for p in tmp_path.iterdir()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        release.set()
        if feeder.is_alive():  # the import never opened the FIFO: unblock the feeder's open
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        feeder.join()
    assert proc.returncode == 130, stderr
    assert "is as it was" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part.extxyz", "slow.extxyz"]


def test_ctrl_c_while_rust_imports(tmp_path: Path, ctrl_c: Any) -> None:
    """SIGINT (simulated: `_thread.interrupt_main`) while the Rust importer
    runs without the GIL: it stops between rows and raises
    KeyboardInterrupt; nothing is left at the output or beside it."""
    import _thread
    import threading

    from mrec import _native
    from mrec._ase_import import row_json

    rows = [row_json(a) for a in structures(64)]
    out = tmp_path / "r.mrec.lmdb"
    native = _native.NativeAseImport(str(out), "test", group_by="system")
    native.begin("rows")
    for k in range(40000):
        native.add(rows[k % 64])
    timer = threading.Timer(0.05, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt, match="import interrupted"):
        native.finish()  # 40,000 rows: well over a second
    timer.join()
    assert list(tmp_path.iterdir()) == []
