"""The structures half of ``python -m mrec.bench``: frames by ordinal,
``Structures`` batches, ``get_atoms``, worker processes and a worker's
memory, with the peers a training loader would use instead, side by side
in one run; and what frames cost when blocks carry forward over long
stretches. Every pass reads every frame in one shuffled order (a fixed
seed); a figure is the median of the timed passes after one untimed pass
(its first pass is reported apart: the reader then makes each record's
entry)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import mrec

Rates = List[float]

_POOL_DATASET: Optional[mrec.Structures] = None


def _passes(passes: int, run: Callable[[], int]) -> Tuple[float, Rates]:
    """(items/s of the first pass, items/s of each of `passes` more)."""
    start = time.perf_counter()
    n = run()
    first = n / (time.perf_counter() - start)
    rates = []
    for _ in range(passes):
        start = time.perf_counter()
        assert run() == n, "every pass reads the same items"
        rates.append(n / (time.perf_counter() - start))
    return first, rates


def _alternated(
    passes: int, a: Callable[[], int], b: Callable[[], int]
) -> Tuple[Tuple[float, Rates], Tuple[float, Rates]]:
    """`_passes` of `a` and of `b`, a pass of each in turn (each round's
    ratio compares passes run under the same load)."""
    firsts, rates = [], ([], [])
    for run in (a, b):
        start = time.perf_counter()
        n = run()
        firsts.append(n / (time.perf_counter() - start))
    for _ in range(passes):
        for run, out in ((a, rates[0]), (b, rates[1])):
            start = time.perf_counter()
            n = run()
            out.append(n / (time.perf_counter() - start))
    return (firsts[0], rates[0]), (firsts[1], rates[1])


def _chunks(order: Sequence[int], n: int) -> List[List[int]]:
    return [list(order[i : i + n]) for i in range(0, len(order), n)]


def _pool_read(batches: List[List[int]]) -> int:
    assert _POOL_DATASET is not None
    return sum(len(_POOL_DATASET.collate(_POOL_DATASET.__getitems__(b))["natoms"]) for b in batches)


def _lance_peer(c: mrec.Collection, order: List[int], passes: int, per_call: int) -> Optional[Tuple[float, Rates]]:
    """Lance (``pylance``): the same frames as one row per frame (numbers,
    positions, forces, energy, cell, pbc), ``take()`` of `per_call` rows
    of the shuffled order a call, its Arrow table as it comes (not made
    NumPy arrays: that would cost it more)."""
    try:
        import lance
        import pyarrow as pa
    except ImportError:
        return None
    ds = mrec.Structures(c, keys=["atomic_numbers", "pos", "forces", "energy", "cell", "pbc"])
    columns: Dict[str, list] = {k: [] for k in ("numbers", "positions", "forces", "energy", "cell", "pbc")}
    for part in _chunks(range(len(ds)), 4096):
        b = ds.batch(part)
        starts = np.concatenate([[0], np.cumsum(b["natoms"])])
        for s in range(len(part)):
            lo, hi = starts[s], starts[s + 1]
            columns["numbers"].append(b["atomic_numbers"][lo:hi])
            columns["positions"].append(b["pos"][lo:hi].reshape(-1))
            columns["forces"].append(b["forces"][lo:hi].reshape(-1))
        columns["energy"].extend(b["energy"].tolist())
        columns["cell"].extend(b["cell"].reshape(-1, 9))
        columns["pbc"].extend(b["pbc"])
    table = pa.table({k: pa.array(list(v)) for k, v in columns.items()})
    with tempfile.TemporaryDirectory(prefix="mrec-bench-lance-") as d:
        lds = lance.write_dataset(table, os.path.join(d, "frames.lance"))
        calls = _chunks(order, per_call)

        def run() -> int:
            return sum(lds.take(call).num_rows for call in calls)

        return _passes(passes, run)


def open_ase_peer(path: str) -> Any:
    """The ASE-LMDB peer opened as ML loaders open it (``ase.db.connect``,
    ``type="aselmdb"`` of ``ase-db-backends``, read-only), or ``None`` with a
    note on stderr saying why it is not measured."""
    try:
        import ase.db
    except ImportError:
        print("note: no `ase`, the ase.db peer is not measured", file=sys.stderr)
        return None
    try:
        return ase.db.connect(path, type="aselmdb", readonly=True, readahead=False)
    except Exception as e:  # noqa: BLE001 (no ase-db-backends, or another ASE)
        print(f"note: ase.db cannot open the peer ({e}); not measured", file=sys.stderr)
        return None


def _ase_peer(path: str, order: List[int], passes: int, per_call: int) -> Optional[Tuple[float, Rates]]:
    """ASE-LMDB through ASE (``ase-db-backends``' ``aselmdb``, read-only, as
    FairChem opens it): ``row.toatoms()`` of each frame of a call of
    `per_call` (frame j is row j + 1 of ``peer.ase.lmdb``)."""
    db = open_ase_peer(path)
    if db is None:
        return None
    calls = _chunks(order, per_call)

    def run() -> int:
        n = 0
        for call in calls:
            for j in call:
                atoms = db._get_row(j + 1).toatoms()
                atoms.get_forces()
                n += 1
        return n

    return _passes(passes, run)


def _atoms_figures(ds: mrec.Structures, order: List[int], passes: int) -> Tuple[Rates, Rates]:
    """``get_atoms(i)`` against ASE's own construction of the same
    structures (``Atoms(numbers, positions, cell, pbc)`` and a
    ``SinglePointCalculator`` with energy and forces, from arrays read
    beforehand), passes interleaved."""
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator

    ready = [ds[i] for i in order]

    def bare() -> int:
        for b in ready:
            a = Atoms(numbers=b["atomic_numbers"], positions=b["pos"], cell=b["cell"], pbc=b["pbc"])
            a.calc = SinglePointCalculator(a, energy=float(b["energy"]), forces=b["forces"])
        return len(ready)

    def ours() -> int:
        for i in order:
            ds.get_atoms(i)
        return len(order)

    ours()
    bare_rates, our_rates = [], []
    for _ in range(passes):
        for run, rates in ((bare, bare_rates), (ours, our_rates)):
            start = time.perf_counter()
            n = run()
            rates.append(n / (time.perf_counter() - start))
    return bare_rates, our_rates


_MEMORY_CHILD = r"""
import json, math, random, sys
import mrec
path, records, budget, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
budget = None if budget == "none" else float(budget)
def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out
ds = mrec.Structures(path, map_budget_mib=budget)
c = ds.collections[0]
first, counts = c.index["first_frame"], c.index["n_frames"]
n = int(first[records - 1] + counts[records - 1])
# A worker is handed batches of indices, not the epoch: the shuffled order
# is a permutation computed batch by batch ((a * i + b) mod n, a coprime
# with n), so that the worker holds nothing that grows with the collection
# but what reading needs.
rng = random.Random(seed)
a = rng.randrange(1, n) | 1
while math.gcd(a, n) != 1:
    a += 2
b = rng.randrange(n)
peak_anon = peak_file = 0.0
for i in range(0, n, 64):
    ds.collate(ds.__getitems__([(a * k + b) % n for k in range(i, min(i + 64, n))]))
    s = status()
    peak_anon, peak_file = max(peak_anon, s["RssAnon"]), max(peak_file, s["RssFile"])
print(json.dumps({"frames": n, "hwm": status()["VmHWM"], "anon": peak_anon, "file": peak_file}))
"""


def _memory(path: str, records: int, budget: Optional[float], seed: int) -> Dict[str, float]:
    """A worker process reading `records` records' frames (shuffled, 64 a
    batch): its peak resident memory (VmHWM) and the peaks of its own
    (anonymous) and file-backed resident memory, sampled after each batch."""
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, path, str(records), "none" if budget is None else str(budget), str(seed)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def _carry_forward(lengths: Sequence[int], every: int) -> List[Tuple[int, float, float, float, float]]:
    """Frames of one long record whose `charges` block changes every
    `every` frames and whose cell is set once, at frame 0 (so frame k
    resolves to its own update, the charges' at k // every * every and the
    cell's at 0): per length L, the time of the first frame read (the
    record's entry made: every header walked), of a frame read after it,
    of the record read whole (`c[r]`), in microseconds, and of one frame
    of a one-frame record for scale."""
    out = []
    with tempfile.TemporaryDirectory(prefix="mrec-bench-carry-") as d:
        for n in lengths:
            path = os.path.join(d, f"long-{n}.mrec.lmdb")
            k = np.arange(n)
            changes = np.arange(0, n, every)
            with mrec.Writer(path, units={"length": "angstrom", "energy": "eV"}) as w:
                w.append(
                    meta={},
                    system={"blocks": {"atoms": {"columns": {"atomic_number": np.array([8, 1, 1], dtype=np.uint64)}}}},
                    trajectory={
                        "step": k,
                        "meta": {"pe": -k.astype(float)},
                        "blocks": {
                            "atoms": {"columns": {c: np.outer(k, [1.0, 2.0, 3.0]) + i for i, c in enumerate("xyz")}},
                            "charges": {
                                "present": np.ones(n, dtype=bool),
                                "columns": {"q": np.repeat(changes.astype(float), every)[:n, None]},
                            },
                        },
                        "cell": {
                            "vectors": np.tile(np.eye(3) * 10.0, (n, 1, 1)),
                            "origin": np.zeros((n, 3)),
                            "boundary": np.ones((n, 3), dtype=bool),
                            "defined": np.ones(n, dtype=bool),
                        },
                    },
                )
            samples = []
            for _ in range(3):
                c = mrec.open(path)
                start = time.perf_counter()
                c.frames([n - 1])
                cold = time.perf_counter() - start
                start = time.perf_counter()
                for j in range(n - 100, n):
                    c.frames([j])
                warm = (time.perf_counter() - start) / 100
                start = time.perf_counter()
                c[0]
                whole = time.perf_counter() - start
                c.close()
                samples.append((cold, warm, whole))
            cold, warm, whole = (statistics.median(s[i] for s in samples) for i in range(3))
            out.append((n, cold * 1e6, warm * 1e6, whole * 1e6, cold / n * 1e9))
    return out


def run(args: Any, c: mrec.Collection) -> List[str]:
    """The figures, printed; returns the target lines."""
    global _POOL_DATASET
    n = c.n_frames
    order = list(range(n))
    random.Random(args.seed).shuffle(order)
    rows: List[Tuple[str, float, Rates, str]] = []

    calls = _chunks(order, 256)

    def by_frames() -> int:
        return sum(len(c.frames(call)["frames"]) for call in calls)

    # Against c.batch of the same frames, pass for pass (the other side
    # of each round's ratio), so that the machine's load moves both.
    record_order = list(range(len(c)))
    random.Random(args.seed).shuffle(record_order)
    record_batches = _chunks(record_order, args.batch)

    def by_records() -> int:
        return sum(int(c.batch(b)["trajectory"]["n_frames"]) for b in record_batches)

    # The rate alone (what a loader sees: nothing else runs between its
    # calls), then in rounds alternating with c.batch for the ratio (each
    # pass then starts with the other's data in the processor's caches).
    first, alone = _passes(args.passes, by_frames)
    frames_rate = statistics.median(alone)
    rows.append(("c.frames(256), shuffled", first, alone, ""))
    (_, rates), (_, batch_rates) = _alternated(args.passes, by_frames, by_records)
    frames_ratio = statistics.median(f / b for f, b in zip(rates, batch_rates))
    rows.append(("c.frames(256), rounds with c.batch", float("nan"), rates, f"{frames_ratio:.2f}x c.batch"))
    rows.append((f"c.batch({args.batch}), the same rounds", float("nan"), batch_rates, ""))
    first, rates = _passes(
        args.passes, lambda: sum(len(c.frames(call, system=True)["frames"]) for call in calls)
    )
    rows.append(("c.frames(256, system=True)", first, rates, ""))

    ds = mrec.Structures(c)
    batches = _chunks(order, 64)

    def collated() -> int:
        return sum(len(ds.collate(ds.__getitems__(b))["natoms"]) for b in batches)

    first, rates = _passes(args.passes, collated)
    structures_rate = statistics.median(rates)
    rows.append(("Structures, collated batches of 64", first, rates, f"keys {','.join(ds.keys)}"))

    sub = order[: args.ase_frames]
    ase_peer = _ase_peer(args.peer, sub, args.passes, 64) if args.peer else None
    ase_rate = None
    if ase_peer is not None:
        ase_rate = statistics.median(ase_peer[1])
        rows.append((f"peer: ASE-LMDB row.toatoms(), {len(sub)} frames", ase_peer[0], ase_peer[1],
                     f"Structures {structures_rate / ase_rate:.0f}x"))

    atoms_sub = order[: args.atoms_frames]
    bare, ours = _atoms_figures(ds, atoms_sub, args.passes)
    atoms_ratio = statistics.median(o / b for o, b in zip(ours, bare))
    rows.append((f"ASE Atoms(...) + SinglePointCalculator, {len(atoms_sub)}", float("nan"), bare, ""))
    rows.append(("Structures.get_atoms(i)", float("nan"), ours, f"{atoms_ratio:.2f}x ASE's own"))

    groups = _chunks(batches, 4)
    _POOL_DATASET = ds
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as one, ctx.Pool(2) as two:
        for pool, workers in ((one, 1), (two, 2)):
            pool.map(_pool_read, groups[: workers * 2])  # started, each worker's reader open
        (_, one_rates), (_, two_rates) = _alternated(
            args.passes,
            lambda: sum(one.map(_pool_read, groups, chunksize=1)),
            lambda: sum(two.map(_pool_read, groups, chunksize=1)),
        )
    _POOL_DATASET = None
    pool_rates = {1: one_rates, 2: two_rates}
    pool_ratio = statistics.median(t / o for t, o in zip(two_rates, one_rates))
    rows.append(("Structures(64) in pool(1), fork", float("nan"), pool_rates[1], ""))
    rows.append(("Structures(64) in pool(2), fork", float("nan"), pool_rates[2], f"{pool_ratio:.2f}x pool(1)"))

    # Lance last: it warns when a process forks after it is imported.
    lance_peer = _lance_peer(c, order, args.passes, 64)
    lance_rate = None
    if lance_peer is not None:
        lance_rate = statistics.median(lance_peer[1])
        rows.append(("peer: Lance take(), 64 a call", lance_peer[0], lance_peer[1],
                     f"Structures {structures_rate / lance_rate:.1f}x"))
    print()
    print(f"{'structures (frames/s)':<44} {'median':>10} {'min':>10} {'max':>10} {'1st pass':>10}  vs")
    for name, first_rate, rates, note in rows:
        first_text = "-" if first_rate != first_rate else f"{first_rate:,.0f}"
        print(f"{name:<44} {statistics.median(rates):>10,.0f} {min(rates):>10,.0f} {max(rates):>10,.0f} "
              f"{first_text:>10}  {note}")
    if ase_peer is None:
        print("peer ASE-LMDB: not measured (give --peer peer.ase.lmdb; needs ase and ase-db-backends)")
    if lance_peer is None:
        print("peer Lance: not measured (pip install pylance pyarrow)")

    # A worker's memory: reading the collection's records, and 4x as many
    # (those of --memory-4x, a workload of 4x the records; else 1/4 and all
    # of this one's), with the default map budget and a small one.
    if args.memory_4x:
        small, big = (c.path, len(c)), (args.memory_4x, len(mrec.open(args.memory_4x)))
    else:
        small, big = (c.path, max(1, len(c) // 4)), (c.path, len(c))
    budgets = (mrec._collection.MAP_BUDGET_MIB, 16)
    memory = {
        (which, budget): _memory(path, records, budget, args.seed)
        for budget in budgets
        for which, (path, records) in (("1x", small), ("4x", big))
    }
    print()
    print(f"{'a worker reading (MiB)':<58} {'VmHWM':>8} {'peak anon':>10} {'peak file':>10}")
    for (which, budget), m in memory.items():
        records = (small if which == "1x" else big)[1]
        what = f"{which}: {records:,} records ({m['frames']:,} frames), map budget {budget:g} MiB"
        print(f"{what:<58} {m['hwm']:>8.1f} {m['anon']:>10.1f} {m['file']:>10.1f}")
    ratios = {
        budget: (memory[("4x", budget)]["hwm"] / memory[("1x", budget)]["hwm"],
                 memory[("4x", budget)]["anon"] / memory[("1x", budget)]["anon"])
        for budget in budgets
    }
    for budget, (hwm, anon) in ratios.items():
        print(f"4x / 1x the records, map budget {budget:g} MiB: VmHWM {hwm:.3f}x, peak anon {anon:.3f}x")

    if args.carry_forward:
        print()
        print("carry-forward: one record, `charges` changing every 1,000 frames, the cell set at frame 0")
        print(f"{'frames':>10} {'first frame (us)':>18} {'next frames (us)':>18} {'c[r] whole (us)':>16} {'1st / frame (ns)':>17}")
        for length, cold, warm, whole, per in _carry_forward((1_000, 10_000, 100_000), 1_000):
            print(f"{length:>10,} {cold:>18,.0f} {warm:>18,.1f} {whole:>16,.0f} {per:>17,.0f}")

    check = lambda ok: "ok" if ok else "MISSED"  # noqa: E731
    targets = [
        f"c.frames(256) >= 700,000 frames/s: {check(frames_rate >= 700_000)} ({frames_rate:,.0f}); "
        f">= 0.6x c.batch (each round's ratio): {check(frames_ratio >= 0.6)} ({frames_ratio:.2f}x)",
        f"Structures(64) >= 400,000 /s: {check(structures_rate >= 400_000)} ({structures_rate:,.0f}); "
        + (f">= 60x ASE-LMDB: {check(structures_rate >= 60 * ase_rate)} ({structures_rate / ase_rate:.0f}x); "
           if ase_rate else "ASE-LMDB peer missing; ")
        + (f">= 10x Lance: {check(structures_rate >= 10 * lance_rate)} ({structures_rate / lance_rate:.1f}x)"
           if lance_rate else "Lance peer missing"),
        f"get_atoms >= 0.8x ASE's own construction: {check(atoms_ratio >= 0.8)} ({atoms_ratio:.2f}x)",
        f"pool(2) >= 1.6x pool(1): {check(pool_ratio >= 1.6)} ({pool_ratio:.2f}x)",
    ] + [
        f"memory 4x / 1x <= 1.2x, map budget {budget:g} MiB: VmHWM {check(hwm <= 1.2)} ({hwm:.3f}x), "
        f"peak anon {check(anon <= 1.2)} ({anon:.3f}x)"
        for budget, (hwm, anon) in ratios.items()
    ]
    return targets
