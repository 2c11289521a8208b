"""`mrec.Structures`: structures read back by the ASE mapping from
collections imported from extxyz files that ase wrote, compared with what
`ase.io.read` gives (numbers, positions, cell, pbc, energy, forces, stress
bit for bit), through items, collated batches and `get_atoms`; several
collections as one dataset; unmapped columns by name; natoms without
decoding; typed errors; pickling and process pools."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import warnings
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

import mrec
import workers

ase = pytest.importorskip("ase", reason="Structures' tests import what ase writes (pip install ase)")
import ase.io  # noqa: E402

from test_import import structures  # noqa: E402  (the structures the importer's tests use)

# fcc111's slabs carry `adsorbate_info`, which extxyz cannot write (ase warns).
pytestmark = pytest.mark.filterwarnings("ignore:Skipping unhashable information")


def bits(a: Any) -> bytes:
    return np.ascontiguousarray(np.asarray(a, dtype=float)).tobytes()


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """An extxyz file ase wrote (200 structures: molecules, slabs with
    fixed atoms and tags, charged molecules, bulk crystals; with and without
    energies, forces, stress), imported; and what ase reads of it."""
    d = tmp_path_factory.mktemp("structures")
    src = d / "mixed.extxyz"
    images = structures()
    for k, a in enumerate(images):
        a.info["charge"] = k % 3 - 1  # OMol-style charge and spin in info
        a.info["spin"] = k % 2 + 1
    ase.io.write(src, images, format="extxyz")
    out = d / "mixed.mrec.lmdb"
    mrec.from_ase(ase.io.iread(src), out)
    return out, ase.io.read(src, ":")


def check_item(item: Any, src: Any) -> None:
    assert list(item["atomic_numbers"]) == list(src.numbers)
    assert item["atomic_numbers"].dtype == np.int64
    assert bits(item["pos"]) == bits(src.positions)
    assert bits(item["cell"]) == bits(src.cell.array)
    assert list(item["pbc"]) == list(src.pbc)
    assert int(item["natoms"]) == len(src)
    results = src.calc.results if src.calc is not None else {}
    if "energy" in results:
        assert float(item["energy"]) == results["energy"]
    else:
        assert np.isnan(item["energy"])
    if "forces" in results:
        assert bits(item["forces"]) == bits(src.get_forces(apply_constraint=False))
    else:
        assert np.isnan(item["forces"]).all()
    if "stress" in results:
        assert bits(item["stress"]) == bits(src.get_stress())
    else:
        assert np.isnan(item["stress"]).all()
    assert list(item["tags"]) == list(src.get_tags())
    fixed = np.zeros(len(src), dtype=bool)
    for c in src.constraints:
        fixed[c.get_indices()] = True
    assert list(item["fixed"]) == list(fixed)
    assert bits(item["initial_charges"]) == bits(src.get_initial_charges())
    assert (int(item["charge"]), int(item["spin"])) == (src.info["charge"], src.info["spin"])


def test_items_are_what_ase_reads(imported: tuple) -> None:
    out, source = imported
    ds = mrec.Structures(out)
    assert len(ds) == len(source) == 200
    for key in ("energy", "forces", "stress", "tags", "fixed", "initial_charges", "charge", "spin"):
        assert key in ds.keys, key
    for i, src in enumerate(source):
        check_item(ds[i], src)


def test_a_collated_batch_is_its_items_side_by_side(imported: tuple) -> None:
    out, source = imported
    ds = mrec.Structures(out)
    order = [17, 3, 150, 42, 199, 0, 42]
    batch = ds.batch(order)
    items = [ds[i] for i in order]
    natoms = [len(source[i]) for i in order]
    assert list(batch["natoms"]) == natoms and list(batch["index"]) == order
    assert list(batch["batch"]) == [s for s, n in enumerate(natoms) for _ in range(n)]
    for key in ("atomic_numbers", "pos", "forces", "tags", "fixed"):
        assert bits(batch[key]) == bits(np.concatenate([it[key] for it in items])), key
    for key in ("cell", "pbc", "energy", "stress", "charge"):
        assert bits(batch[key]) == bits(np.stack([it[key] for it in items])), key
    # collate of items (the generic path) gives the same batch
    again = mrec.collate(items)
    for key, value in batch.items():
        assert bits(again[key]) == bits(value), key
    got = ds.__getitems__(order)
    assert len(got) == len(order) and bits(got[2]["pos"]) == bits(source[150].positions)
    assert "batch" not in got[0] and "batch" not in ds[0]


def test_get_atoms_is_what_ase_reads(imported: tuple) -> None:
    out, source = imported
    ds = mrec.Structures(out)
    for i, src in enumerate(source):
        a = ds.get_atoms(i)
        assert list(a.numbers) == list(src.numbers)
        assert bits(a.positions) == bits(src.positions)
        assert bits(a.cell.array) == bits(src.cell.array) and list(a.pbc) == list(src.pbc)
        assert list(a.get_tags()) == list(src.get_tags())
        assert bits(a.get_initial_charges()) == bits(src.get_initial_charges())
        assert [type(c).__name__ for c in a.constraints] == [type(c).__name__ for c in src.constraints]
        for c, d in zip(a.constraints, src.constraints):
            assert list(c.get_indices()) == list(d.get_indices())
        results = src.calc.results if src.calc is not None else {}
        got = a.calc.results if a.calc is not None else {}
        assert sorted(got) == sorted(k for k in results if k in ("energy", "forces", "stress", "free_energy"))
        if "energy" in results:
            assert a.get_potential_energy() == src.get_potential_energy()
        if "forces" in results:
            assert bits(a.get_forces(apply_constraint=False)) == bits(src.get_forces(apply_constraint=False))
        if "stress" in results:
            assert bits(a.get_stress()) == bits(src.get_stress())
        assert (a.info["charge"], a.info["spin"]) == (src.info["charge"], src.info["spin"])



def test_get_atoms_builds_what_ases_constructors_build(imported: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """`get_atoms` fills the objects' attributes directly where that gives
    what ASE's constructors give: with the installed ase it does, and every
    attribute of the atoms, of the calculator and of its copy of the atoms
    equals the constructors' (types, dtypes, values); the copy shares no
    array; a moved atom is seen by the calculator."""
    from mrec import _ase_build

    out, _ = imported
    ds = mrec.Structures(out)
    assert _ase_build._fast(), "the installed ase is not matched by the direct path"
    built = [ds.get_atoms(i) for i in range(len(ds))]
    monkeypatch.setattr(_ase_build, "_FAST", False)
    made = [ds.get_atoms(i) for i in range(len(ds))]

    def attributes(x: Any) -> dict:
        out = {}
        for key, value in vars(x).items():
            if key in ("_calc", "atoms"):
                continue
            if hasattr(value, "array"):  # Cell
                value = value.array
            if isinstance(value, np.ndarray):
                value = (value.dtype.str, value.shape, value.tobytes())
            elif isinstance(value, dict):
                value = {k: (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v for k, v in value.items()}
            elif isinstance(value, list):
                value = [(type(c).__name__, repr(c.todict())) for c in value]
            elif callable(value):
                value = (value.__func__, value.__self__ is x)
            out[key] = (type(vars(x)[key]), value)
        return out

    with_calc = 0
    for a, b in zip(built, made):
        assert type(a) is type(b) and attributes(a) == attributes(b)
        assert (a.calc is None) == (b.calc is None)
        if b.calc is None:
            continue
        with_calc += 1
        assert type(a.calc) is type(b.calc) and attributes(a.calc) == attributes(b.calc)
        assert attributes(a.calc.atoms) == attributes(b.calc.atoms) and a.calc.atoms is not a
        copy = a.calc.atoms
        for key, value in vars(a).items():
            assert value is None or value is not vars(copy)[key], key
        assert a.cell.array is not copy.cell.array
        for x in a.arrays.values():
            assert not any(np.shares_memory(x, y) for y in copy.arrays.values())
        assert a.calc.check_state(a) == [] and a.get_potential_energy() == b.get_potential_energy()
        a.positions[0, 0] += 1.0
        assert a.calc.check_state(a) == ["positions"]
    assert with_calc > 100

def test_several_collections_are_one_dataset(imported: tuple, tmp_path: Path) -> None:
    out, source = imported
    second = tmp_path / "second.mrec.lmdb"
    mrec.from_ase(source[:30], second)
    ds = mrec.Structures([out, second])
    assert len(ds) == 230
    assert ds.id_of(205) == (1, 5, 0) and ds.index_of(1, 5, 0) == 205
    assert ds.ids[3] == (0, 3, 0) and len(ds.ids) == 230
    order = [205, 3, 229, 150, 200, 0]
    batch = ds.batch(order)
    want = [source[i] if i < 200 else source[i - 200] for i in order]
    assert list(batch["index"]) == order
    assert bits(batch["pos"]) == bits(np.concatenate([w.positions for w in want]))
    assert bits(batch["energy"]) == bits([ds[i]["energy"] for i in order])
    assert bits(batch["forces"]) == bits(np.concatenate([ds[i]["forces"] for i in order]))
    assert list(batch["batch"]) == [s for s, w in enumerate(want) for _ in range(len(w))]
    # A glob, a directory, and a FairChem-style config's `src` name files.
    assert len(mrec.Structures(str(tmp_path / "*.mrec.lmdb"))) == 30
    assert len(mrec.Structures(tmp_path)) == 30
    config = {"format": "mrec", "src": [str(out), str(second)], "a2g_args": {"r_energy": True}}
    from_config = mrec.Structures.from_config(config)
    assert len(from_config) == 230 and from_config.keys == ds.keys
    assert bits(from_config.get_atoms(205).positions) == bits(source[5].positions)
    with pytest.raises(KeyError, match="src"):
        mrec.Structures.from_config({"format": "mrec"})


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("structures-synthetic") / "synthetic.mrec.lmdb"
    workers.make_collection(path, 120)
    return path


def test_unmapped_columns_are_reachable_by_name(synthetic: Path) -> None:
    ds = mrec.Structures(synthetic, extra=["atoms.element", "events.energy", "meta.pe"])
    assert "events.energy" in ds.unmapped() and "atoms.element" not in ds.unmapped()
    c = ds.collections[0]
    for r in (0, 5, 15, 20):  # records with the ragged `events` block
        first = int(c.index["first_frame"][r])
        rec = c[r]
        t = rec["trajectory"]
        events = t["blocks"]["events"]
        for k in range(t["n_frames"]):
            item = ds[first + k]
            if "offsets" in events:  # ragged: flat rows
                lo, hi = events["offsets"][k], events["offsets"][k + 1]
                want = events["columns"]["energy"][lo:hi]
            else:  # the same rows at every frame: stacked
                want = events["columns"]["energy"][k]
            assert bits(item["events.energy"]) == bits(want)
            assert int(item["events.energy.count"]) == len(want)
            assert list(item["atoms.element"]) == list(rec["system"]["blocks"]["atoms"]["columns"]["element"])
            assert float(item["meta.pe"]) == t["meta"]["pe"][k] == float(item["energy"])
    batch = ds.batch([0, 1, 2])
    assert len(batch["events.energy"]) == int(batch["events.energy.count"].sum())


def test_natoms_without_decoding_and_get_metadata(synthetic: Path) -> None:
    ds = mrec.Structures(synthetic)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # atoms in the systems: no walk, no warning
        natoms = ds.natoms
    assert natoms.dtype == np.int64 and len(natoms) == len(ds)
    assert list(natoms[:40]) == [len(ds[i]["atomic_numbers"]) for i in range(40)]
    assert ds.get_metadata("natoms", 3) == natoms[3]
    assert list(ds.get_metadata("natoms", [5, 1])) == [natoms[5], natoms[1]]
    assert ds.metadata_hasattr("natoms") and not ds.metadata_hasattr("energy")
    with pytest.raises(KeyError, match="'energy'"):
        ds.get_metadata("energy", 0)


def test_natoms_of_trajectories_whose_atoms_change_are_computed_and_said(tmp_path: Path) -> None:
    """Atoms only in the trajectory, their count changing: the index has the
    first frame's count; each such record's headers are read, with a
    warning saying so."""
    path = tmp_path / "grow.mrec.lmdb"
    counts = [[2, 3, 3, 5], [4], [1, 2]]
    with mrec.Writer(path, units={"length": "angstrom"}) as w:
        for rec in counts:
            n = np.array(rec)
            offsets = np.concatenate([[0], np.cumsum(n)])
            rows = int(offsets[-1])
            w.append(
                meta={},
                trajectory={
                    "step": np.arange(len(rec)),
                    "blocks": {
                        "atoms": {
                            "offsets": offsets,
                            "columns": {
                                "atomic_number": np.full(rows, 6, dtype=np.uint64),
                                "x": np.arange(rows, dtype=float),
                                "y": np.zeros(rows),
                                "z": np.zeros(rows),
                            },
                        }
                    },
                },
            )
    ds = mrec.Structures(path)
    with pytest.warns(mrec.NatomsComputed, match="2 trajectories"):
        natoms = ds.natoms
    assert list(natoms) == [c for rec in counts for c in rec]
    assert [len(ds[i]["pos"]) for i in range(len(ds))] == list(natoms)
    assert ds.get_metadata("natoms", 3) == 5
    # Not kept in a pickle: a worker does not carry a per-structure array.
    back = pickle.loads(pickle.dumps(ds))
    assert back._natoms is None and len(back) == len(ds)


def test_bad_input_raises_typed_errors_naming_what_is_missing(synthetic: Path, tmp_path: Path) -> None:
    ds = mrec.Structures(synthetic)
    n = len(ds)
    with pytest.raises(IndexError, match=f"structure {n} out of range: the dataset has {n}"):
        ds[n]
    with pytest.raises(IndexError):
        ds.batch([0, -n - 1])
    with pytest.raises(IndexError):
        ds.get_atoms(n)
    assert ds[-1]["index"] == n - 1
    # A collection without an atoms block.
    path = tmp_path / "no-atoms.mrec.lmdb"
    with mrec.Writer(path, units={"length": "angstrom"}) as w:
        w.append(meta={}, system={"blocks": {"bonds": {"columns": {"a": np.array([0, 1], dtype=np.uint64)}}}})
    with pytest.raises(mrec.Missing, match="no `atoms` block") as e:
        mrec.Structures(path)
    assert isinstance(e.value, LookupError) and e.value.what == "block `atoms`"
    # A frame without positions.
    path = tmp_path / "no-positions.mrec.lmdb"
    with mrec.Writer(path, units={"length": "angstrom"}) as w:
        w.append(
            meta={},
            system={"blocks": {"atoms": {"columns": {"atomic_number": np.array([1, 8], dtype=np.uint64)}}}},
            trajectory={"step": np.arange(2), "meta": {"pe": np.array([1.0, 2.0])}},
        )
    ds = mrec.Structures(path)
    with pytest.raises(mrec.Missing, match="has no column `x` of block `atoms`") as e:
        ds[1]
    assert (e.value.frame, e.value.record, e.value.position) == (1, 0, 1)
    assert pickle.loads(pickle.dumps(e.value)).what == e.value.what


def read_batches(args: tuple) -> List[tuple]:
    ds, batches = args
    return [(list(b["index"]), bits(b["pos"]), bits(b["energy"])) for b in map(ds.batch, batches)]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pickled_and_in_process_pools(synthetic: Path, method: str) -> None:
    ds = mrec.Structures(synthetic)
    ds.batch([0, 1])  # opened in the parent first
    data = pickle.dumps(ds)
    assert len(data) < 2000
    batches = [list(range(i, min(i + 16, len(ds)), 3)) for i in range(0, len(ds), 16)]
    want = read_batches((ds, batches))
    with mp.get_context(method).Pool(2) as pool:
        parts = pool.map(read_batches, [(ds, batches[i::2]) for i in range(2)])
    got = [None] * len(batches)
    for i, part in enumerate(parts):
        for k, b in enumerate(part):
            got[i + 2 * k] = b
    assert got == want


TORCH_DTYPES = {"i64": "int64", "f64": "float64", "bool": "bool"}


def expected_outputs(batch: Any) -> dict:
    """Every output of a batch of the whole mapping: (NumPy dtype, shape)
    as docs/python.md's table has them."""
    n, atoms = len(batch["natoms"]), int(batch["natoms"].sum())
    want = {
        "cell": ("float64", (n, 3, 3)),
        "pbc": ("bool", (n, 3)),
        "batch": ("int64", (atoms,)),
        **{k: ("int64", (n,)) for k in ("natoms", "index", "record", "frame")},
    }
    for f in mrec._structures.FIELDS:
        want[f.key] = (TORCH_DTYPES[f.dtype], ((atoms,) if f.per_atom else (n,)) + f.shape)
    return want


def test_torch_tensors_share_what_rust_gathered(imported: tuple, synthetic: Path) -> None:
    """tensors="torch": every output a tensor of the NumPy batch's dtype and
    shape, over the very memory Rust filled (no copy); lists stay lists."""
    import torch

    out, _ = imported
    every = [f.key for f in mrec._structures.FIELDS]
    for ds, whole_mapping in (
        (mrec.Structures(out, keys=every, tensors="torch"), True),
        (mrec.Structures(synthetic, extra=["atoms.element", "events.energy", "meta.pe"], tensors="torch"), False),
    ):
        gathered = ds.__getitems__([3, 1, 7, 2])
        arrays = dict(gathered.arrays)  # what Rust filled
        batch = ds.collate(gathered)
        assert sorted(batch) == sorted(arrays)
        want = expected_outputs(arrays) if whole_mapping else {}
        if whole_mapping:
            assert sorted(want) == sorted(batch)
        for key, value in arrays.items():
            t = batch[key]
            if isinstance(value, np.ndarray) and value.dtype != object:
                assert isinstance(t, torch.Tensor), key
                assert t.dtype == getattr(torch, value.dtype.name) and tuple(t.shape) == value.shape, key
                if key in want:
                    assert (value.dtype.name, value.shape) == want[key], key
                assert t.data_ptr() == value.ctypes.data, f"{key} was copied"
            else:
                assert t is value, key  # strings: as they were
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=mrec.FrameSampler(ds, seed=1, batch_size=8), collate_fn=ds.collate, num_workers=2
    )
    seen = sorted(int(i) for b in loader for i in b["index"])
    assert seen == list(range(len(ds)))
