"""Writes the ASE-LMDB shards `mrec import aselmdb` is tested on, with
the real `ase` and `ase-db-backends`, and what ase reads back from them.

    python3 make_aselmdb.py OUT_DIR [ROWS_PER_SHARD]

OUT_DIR/a.aselmdb and OUT_DIR/b.aselmdb: molecules and periodic slabs and
crystals, with and without energy, forces, charges, tags, momenta, masses
and constraints; a few rows deleted in each shard; key_value_pairs `sid`
(a trajectory id shared across both shards), `fid` (its frame number),
`name`, and data scalars. OUT_DIR/t.aselmdb: four trajectories
(`traj`, `step`), rows interleaved. OUT_DIR/expected.json (and
expected-t.json): every row as ase reads it
(`LMDBDatabase(...).select()`, in its order, shard a then b), floats as the
integers of their IEEE-754 bits so that the comparison is exact.
"""
import json
import sys

import numpy as np
from ase import Atoms
from ase.build import bulk, fcc100, fcc111, molecule
from ase.calculators.singlepoint import SinglePointCalculator
from ase.constraints import FixAtoms, FixBondLength, FixCartesian
from ase_db_backends.aselmdb import LMDBDatabase

MOLECULES = ["H2O", "NH3", "CH4", "C6H6", "CH3CH2OH", "CO2", "HCN", "C2H4"]


def structure(rng, i):
    kind = i % 5
    if kind in (0, 1, 2):
        a = molecule(MOLECULES[i % len(MOLECULES)])
        a.positions += rng.normal(scale=0.05, size=a.positions.shape)
        if i % 7 == 0:
            a.center(vacuum=4.0)  # a cell, no periodicity
    elif kind == 3:
        a = (fcc111 if i % 2 else fcc100)("Cu", size=(2, 2, 3), vacuum=8.0)
        a.positions += rng.normal(scale=0.02, size=a.positions.shape)
        bottom = [atom.index for atom in a if atom.tag == 3]
        a.set_constraint(FixAtoms(indices=bottom))
    else:
        a = bulk("Si" if i % 2 else "NaCl", "diamond" if i % 2 else "rocksalt", a=5.4, cubic=True)
        a.rattle(0.01, seed=i)
    if i % 3 == 0:
        a.set_initial_charges(rng.normal(scale=0.3, size=len(a)))
    if i % 4 == 1:
        a.set_tags(rng.integers(0, 3, size=len(a)))
    if i % 6 == 2:
        a.set_momenta(rng.normal(size=(len(a), 3)), apply_constraint=False)
    if i % 11 == 5:
        a.set_masses(rng.uniform(1.0, 50.0, size=len(a)))
    if kind != 3 and i % 9 == 4:
        a.set_constraint(FixCartesian(0, mask=[True, False, True]))
    if kind in (0, 1, 2) and i % 13 == 6 and len(a) > 1:
        a.set_constraint(FixBondLength(0, 1))
    if i % 4 != 3:
        results = {"energy": float(rng.normal(-10.0, 3.0))}
        if i % 8 != 2:
            results["forces"] = rng.normal(size=(len(a), 3))
        if kind == 4 and i % 2:
            results["stress"] = rng.normal(size=6)
        a.calc = SinglePointCalculator(a, **results)
    return a


def write_shard(path, rng, first, rows, deleted):
    db = LMDBDatabase(path)
    for k in range(rows):
        i = first + k
        kvp = {"sid": i % 17, "fid": i, "name": f"s{i}"}
        if i % 5 == 0:
            kvp["relaxed"] = bool(i % 10 == 0)
        data = {"ref_energy": float(i) * 0.5, "source": "test"} if i % 3 == 1 else {}
        db.write(structure(rng, i), key_value_pairs=kvp, data=data)
    db.delete(deleted)
    db.metadata = {"title": f"shard from {first}", "rows": rows}
    db.close()


def write_trajectories(path, rng):
    """Four trajectories, their rows interleaved and their frames out of
    order: `traj` names one, `step` (0, 10, 20, ...) orders it."""
    trajs = {}
    slab = fcc111("Cu", size=(2, 2, 3), vacuum=8.0)
    slab.set_constraint(FixAtoms(indices=[a.index for a in slab if a.tag == 3]))
    slab.set_initial_charges(np.linspace(-0.5, 0.5, len(slab)))
    trajs["relax"] = []
    for k in range(8):
        a = slab.copy()
        a.positions += rng.normal(scale=0.01 * (8 - k), size=a.positions.shape)
        a.calc = SinglePointCalculator(a, energy=-30.0 - k * 0.1, forces=rng.normal(size=(len(a), 3)))
        trajs["relax"].append(a)
    water = molecule("H2O")
    trajs["md"] = []
    for k in range(10):
        a = water.copy()
        a.positions += rng.normal(scale=0.05, size=a.positions.shape)
        a.set_momenta(rng.normal(size=(len(a), 3)))
        results = {"energy": -14.0 + 0.01 * k}
        if k != 4:
            results["forces"] = rng.normal(size=(len(a), 3))
        a.calc = SinglePointCalculator(a, **results)
        trajs["md"].append(a)
    trajs["grow"] = []
    for k in range(5):
        a = molecule("CH4")[: 2 + k % 4]
        a.positions += rng.normal(scale=0.05, size=a.positions.shape)
        a.calc = SinglePointCalculator(a, energy=-5.0 * k, forces=rng.normal(size=(len(a), 3)))
        trajs["grow"].append(a)
    trajs["tags"] = []
    for k in range(6):
        a = bulk("Si", "diamond", a=5.43, cubic=True)
        a.rattle(0.02, seed=k)
        a.set_tags([k % 2] * len(a))
        a.cell[0, 0] += 0.01 * k
        a.calc = SinglePointCalculator(a, energy=-40.0 + k, forces=rng.normal(size=(len(a), 3)), stress=rng.normal(size=6))
        trajs["tags"].append(a)
    rows = [(name, k, a) for name, frames in trajs.items() for k, a in enumerate(frames)]
    order = rng.permutation(len(rows))
    db = LMDBDatabase(path)
    for i in order:
        name, k, a = rows[i]
        db.write(a, key_value_pairs={"traj": name, "step": 10 * k})
    db.close()


def bits(x):
    return np.ascontiguousarray(np.asarray(x, dtype=np.float64)).view(np.uint64).ravel().tolist()


def expected(path):
    db = LMDBDatabase(path, readonly=True)
    out = []
    for row in db.select():
        atoms = row.toatoms()
        e = {
            "id": row.id,
            "numbers": atoms.numbers.tolist(),
            "positions": bits(atoms.positions),
            "cell": bits(atoms.cell.array),
            "pbc": atoms.pbc.tolist(),
            "energy": None,
            "forces": None,
            "charges": bits(row.initial_charges) if "initial_charges" in row else None,
            "tags": row.tags.tolist() if "tags" in row else None,
            "momenta": bits(row.momenta) if "momenta" in row else None,
            "masses": bits(row.masses) if "masses" in row else None,
            "fixed": None,
            "key_value_pairs": row.key_value_pairs,
        }
        if atoms.calc is not None:
            if "energy" in atoms.calc.results:
                e["energy"] = bits(atoms.calc.results["energy"])[0]
            if "forces" in atoms.calc.results:
                e["forces"] = bits(atoms.calc.results["forces"])
        for c in atoms.constraints:
            if isinstance(c, FixAtoms):
                fixed = [False] * len(atoms)
                for j in c.get_indices():
                    fixed[int(j)] = True
                e["fixed"] = fixed
        out.append(e)
    db.close()
    return out


def main():
    out_dir = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    rng = np.random.default_rng(29)
    write_shard(f"{out_dir}/a.aselmdb", rng, 0, rows, [3, 10, 11])
    write_shard(f"{out_dir}/b.aselmdb", rng, rows, rows, [1, rows])
    rows_read = expected(f"{out_dir}/a.aselmdb") + expected(f"{out_dir}/b.aselmdb")
    with open(f"{out_dir}/expected.json", "w") as f:
        json.dump(rows_read, f)
    write_trajectories(f"{out_dir}/t.aselmdb", rng)
    with open(f"{out_dir}/expected-t.json", "w") as f:
        json.dump(expected(f"{out_dir}/t.aselmdb"), f)


main()
