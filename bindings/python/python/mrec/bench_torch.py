"""``python -m mrec.bench_torch``: mrec beside FairChem's ``AseDBDataset``,
each feeding torch's ``DataLoader``, in one run.

Writes ``--structures`` molecules (8 to 64 atoms: positions, forces,
energy; ``mrec.bench_ray.write_shard``) as an ASE-LMDB shard with
ase-db-backends, and three more shards for the 4x figures, then imports
them (mrec's importer: one shard, and the four into one collection). Every
loader is a ``DataLoader`` over the same shuffled batches of 64 structures
(``FrameSampler(batch_size=64)``, a fixed seed), fork workers, torch
tensors:

- mrec: ``mrec.Loader(Structures(file, tensors="torch"), sampler,
  num_workers=2)``, and with 1 worker; with ``tensors="numpy"`` too;
- FairChem: ``DataLoader(AseDBDataset({"src": shard, "a2g_args":
  {"r_energy": True, "r_forces": True}}), batch_sampler=<the same
  batches>, collate_fn=data_list_collater, num_workers=2)``: its
  ``AtomicData`` batches, on the first ``--fairchem-structures`` of the
  epoch (it is slow).

Figures, medians of ``--passes`` rounds (each round runs every loader once,
in turn, so that each round's ratios compare passes under the same load):
structures/s from the first batch to the last (the loaders' workers kept
between passes: ``persistent_workers``), with the CPU time a structure
costs the workers together and the main process (what more workers can
divide when the machine has the cores); the time from ``iter()`` to the
first batch of a new loader (workers started, files opened in them); each
worker's own memory (peak private dirty pages, ``/proc/PID/smaps_rollup``:
what it alone holds, not the pages it shares with the main process after
the fork) and peak resident size, over an epoch of the 1x and the 4x data;
``Structures.batch(64)`` in one process, NumPy against torch tensors; and
an epoch stopped at ``--stops`` points (the first batch, the last, random
ones) with 2 workers and resumed from its state with 1: the structures
lost or repeated.

Needs torch, ase, ase-db-backends and ``fairchem-core`` (which pins its own
torch: a venv of its own, docs/python.md).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import mrec
from mrec import _native
from mrec.bench_ray import machine, write_shard

BATCH = 64


def _own_memory(pid: int) -> Tuple[float, float]:
    """(private dirty MiB, resident MiB) of process `pid`."""
    private = rss = 0.0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "Private_Dirty":
                private = int(value.split()[0]) / 1024
            elif key == "Rss":
                rss = int(value.split()[0]) / 1024
    return private, rss


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _workers_of(it: Any) -> List[int]:
    inner = getattr(it, "_inner", it)  # mrec.Loader's iterator wraps DataLoader's
    return [w.pid for w in getattr(inner, "_workers", [])]


def _structures_in(batch: Any) -> int:
    return int(batch["natoms"].shape[0])


class Case:
    """One loader: how to make it, and how many structures a batch holds."""

    def __init__(self, name: str, make: Callable[[bool], Any], count: Callable[[Any], int]) -> None:
        self.name = name
        self.make = make
        self.count = count
        self.live: Optional[Any] = None
        #: CPU microseconds a structure of each pass: the workers' together, the main process's.
        self.cpu: List[Tuple[float, float]] = []

    def timed_pass(self) -> float:
        """Structures/s of one pass of the persistent loader, from its first
        batch to its last (and its CPU time a structure, in `cpu`)."""
        if self.live is None:
            self.live = self.make(True)
            for _ in self.live:  # workers started, warmed
                pass
        it = iter(self.live)
        next(it)
        pids = _workers_of(it)
        workers_cpu = [_cpu_seconds(p) for p in pids]
        main_cpu = time.process_time()
        n = 0
        start = time.perf_counter()
        for batch in it:
            n += self.count(batch)
        rate = n / (time.perf_counter() - start)
        spent = sum(_cpu_seconds(p) - c for p, c in zip(pids, workers_cpu))
        self.cpu.append((spent / n * 1e6, (time.process_time() - main_cpu) / n * 1e6))
        return rate

    def first_batch(self) -> float:
        """Seconds from a new loader's ``iter()`` to its first batch."""
        loader = self.make(False)
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        took = time.perf_counter() - start
        del it, loader
        return took

    def memory(self) -> Tuple[float, float, int]:
        """A new loader through one epoch: its workers' peaks of (private
        dirty MiB, resident MiB), the larger worker's, and the structures."""
        loader = self.make(False)
        it = iter(loader)
        pids = _workers_of(it)
        peak = [0.0, 0.0]
        n = 0
        for batch in it:
            n += self.count(batch)
            for pid in pids:
                try:
                    private, rss = _own_memory(pid)
                except OSError:  # a worker done with its share
                    continue
                peak = [max(peak[0], private), max(peak[1], rss)]
        return peak[0], peak[1], n

    def close(self) -> None:
        self.live = None


def _mrec_case(name: str, path: str, workers: int, tensors: str, seed: int) -> Case:
    ds = mrec.Structures(path, tensors=tensors)

    def make(persistent: bool) -> Any:
        sampler = mrec.FrameSampler(ds, seed=seed, batch_size=BATCH)
        return mrec.Loader(ds, sampler, num_workers=workers, multiprocessing_context="fork",
                           persistent_workers=persistent and workers > 0)

    return Case(name, make, _structures_in)


def _fairchem_case(name: str, src: str, batches: List[List[int]], workers: int) -> Case:
    from fairchem.core.datasets import AseDBDataset, data_list_collater
    import torch.utils.data

    ds = AseDBDataset({"src": src, "a2g_args": {"r_energy": True, "r_forces": True}})

    def make(persistent: bool) -> Any:
        return torch.utils.data.DataLoader(ds, batch_sampler=batches, collate_fn=data_list_collater,
                                           num_workers=workers, multiprocessing_context="fork",
                                           persistent_workers=persistent and workers > 0)

    return Case(name, make, lambda b: int(b.natoms.shape[0]))


def _resumes(path: str, seed: int, count: int) -> Tuple[List[int], int, int]:
    """An epoch stopped after batch k (the first, the last, random ones) with
    2 workers, its state given to a new loader with 1 worker: the stop
    points, and the structures lost and repeated over all of them."""
    ds = mrec.Structures(path, tensors="torch")
    total = len(mrec.FrameSampler(ds, seed=seed, batch_size=BATCH))
    rng = np.random.default_rng(seed)
    stops = sorted({1, total} | set(rng.integers(2, total, max(0, count - 2)).tolist()))
    lost = repeated = 0
    for k in stops:
        seen: List[int] = []
        first = mrec.Loader(ds, mrec.FrameSampler(ds, seed=seed, batch_size=BATCH), num_workers=2,
                            multiprocessing_context="fork")
        for step, batch in enumerate(first, 1):
            seen.extend(batch["index"].tolist())
            if step == k:
                break
        state = first.state_dict()
        del first
        again = mrec.Loader(ds, mrec.FrameSampler(ds, seed=seed, batch_size=BATCH), num_workers=1,
                            multiprocessing_context="fork")
        again.load_state_dict(state)
        for batch in again:
            seen.extend(batch["index"].tolist())
        counts = np.bincount(np.asarray(seen, dtype=np.int64), minlength=len(ds))
        lost += int((counts == 0).sum())
        repeated += int((counts > 1).sum())
    return stops, lost, repeated


def _write(work: str, n: int) -> Tuple[str, List[str], str, str]:
    """The ASE-LMDB shards (1x: one; 4x: it and three more) and their
    imports."""
    src = os.path.join(work, "aselmdb")
    os.makedirs(src, exist_ok=True)
    shards = [os.path.join(src, f"data{k}.aselmdb") for k in range(4)]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(write_shard, [(p, n, k + 1) for k, p in enumerate(shards)])
    one, four = os.path.join(work, "1x.mrec.lmdb"), os.path.join(work, "4x.mrec.lmdb")
    if not os.path.exists(four):
        _native.import_aselmdb([shards[0]], one, threads=2, overwrite=True)
        _native.import_aselmdb(shards, four, threads=2, overwrite=True)
    print(f"data: 4 ASE-LMDB shards of {n:,} structures (ase-db-backends) and their imports, "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    return shards[0], shards, one, four


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mrec.bench_torch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where the data goes (kept and reused; default: a temporary directory)")
    ap.add_argument("--structures", type=int, default=10_000, help="structures of the 1x data (default 10,000)")
    ap.add_argument("--fairchem-structures", type=int, default=2_048,
                    help="structures of each FairChem pass (default 2,048; it is slow)")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stops", type=int, default=10, help="stop points of the resume check (default 10)")
    args = ap.parse_args(argv)
    try:
        import fairchem.core  # noqa: F401
        import torch
    except ImportError as e:
        ap.error(f"{e}: the peer needs fairchem-core (and torch), in a venv of its own (docs/python.md)")

    work = args.dir or tempfile.mkdtemp(prefix="mrec-bench-torch-")
    os.makedirs(work, exist_ok=True)
    shard, shards, one, four = _write(work, args.structures)

    opened = {}
    start = time.perf_counter()
    ds = mrec.Structures(one, tensors="torch")
    opened["mrec Structures"] = time.perf_counter() - start
    from fairchem.core.datasets import AseDBDataset

    start = time.perf_counter()
    AseDBDataset({"src": shard})
    opened["FairChem AseDBDataset"] = time.perf_counter() - start
    epoch = [b.tolist() for b in mrec.FrameSampler(ds, seed=args.seed, batch_size=BATCH).batches(0)]
    fc_batches = epoch[: max(1, args.fairchem_structures // BATCH)]

    cases = [
        _mrec_case("mrec, 2 workers", one, 2, "torch", args.seed),
        _mrec_case("mrec, 1 worker", one, 1, "torch", args.seed),
        _mrec_case("mrec, 2 workers, tensors=numpy", one, 2, "numpy", args.seed),
        _fairchem_case(f"FairChem AseDBDataset, 2 workers ({len(fc_batches) * BATCH:,})", shard, fc_batches, 2),
    ]
    rates: Dict[str, List[float]] = {c.name: [] for c in cases}
    for _ in range(args.passes):
        for c in cases:
            rates[c.name].append(c.timed_pass())
    for c in cases:
        c.close()
    firsts = {c.name: statistics.median(c.first_batch() for _ in range(3)) for c in cases}

    # One process, no loader: NumPy arrays against tensors over them.
    in_process: Dict[str, List[float]] = {"numpy": [], "torch": []}
    plain = {t: mrec.Structures(one, tensors=t) for t in in_process}
    for _ in range(args.passes):
        for t, d in plain.items():
            start = time.perf_counter()
            n = sum(len(d.batch(b)["natoms"]) for b in epoch)
            in_process[t].append(n / (time.perf_counter() - start))

    resumes = _resumes(one, args.seed, args.stops)

    memory = {}
    for label, path, fc_src in (("1x", one, shard), ("4x", four, os.path.dirname(shard))):
        c = _mrec_case("mrec", path, 2, "torch", args.seed)
        memory[("mrec, 2 workers, an epoch", label)] = c.memory()
        f = _fairchem_case("FairChem", fc_src, fc_batches, 2)
        memory[(f"FairChem, 2 workers, {len(fc_batches) * BATCH:,} structures", label)] = f.memory()

    m = machine()
    print(f"mrec {mrec.__version__} beside fairchem-core (torch {torch.__version__}): {args.structures:,} "
          f"structures (1x), {args.passes} rounds, fork workers, batches of {BATCH}; Python {m['python']}, "
          f"{m['cpus']} CPUs ({m['cpu']}), load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'loader (structures/s)':<48} {'median':>10} {'min':>10} {'max':>10} {'first batch (s)':>16} "
          f"{'CPU us: workers':>16} {'main':>6}")
    for c in cases:
        r = rates[c.name]
        workers_us = statistics.median(w for w, _ in c.cpu)
        main_us = statistics.median(m for _, m in c.cpu)
        print(f"{c.name:<48} {statistics.median(r):>10,.0f} {min(r):>10,.0f} {max(r):>10,.0f} {firsts[c.name]:>16.3f} "
              f"{workers_us:>16.1f} {main_us:>6.1f}")
    for t, r in in_process.items():
        print(f"{'one process, Structures.batch(64), ' + t:<48} {statistics.median(r):>10,.0f} "
              f"{min(r):>10,.0f} {max(r):>10,.0f}")
    print("opening the dataset (s): " + ", ".join(f"{k} {v:.3f}" for k, v in opened.items()))
    print()
    print(f"{'a worker (MiB, the larger of two)':<56} {'own 1x':>8} {'own 4x':>8} {'ratio':>6} {'RSS 1x':>8} {'RSS 4x':>8}")
    for what in dict.fromkeys(k for k, _ in memory):
        a, b = memory[(what, "1x")], memory[(what, "4x")]
        print(f"{what:<56} {a[0]:>8.1f} {b[0]:>8.1f} {b[0] / a[0]:>5.2f}x {a[1]:>8.1f} {b[1]:>8.1f}")

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

    fc = cases[3].name
    vs_fairchem = ratio("mrec, 2 workers", fc)
    vs_one = ratio("mrec, 2 workers", "mrec, 1 worker")
    vs_numpy = ratio("mrec, 2 workers", "mrec, 2 workers, tensors=numpy")
    torch_in_process = statistics.median(t / n for t, n in zip(in_process["torch"], in_process["numpy"]))
    own = memory[("mrec, 2 workers, an epoch", "4x")][0] / memory[("mrec, 2 workers, an epoch", "1x")][0]
    check = lambda ok: "ok" if ok else "MISSED"  # noqa: E731
    print()
    print("ratios (median of each round's):")
    print(f"target: mrec 2 workers >= 20x FairChem AseDBDataset 2 workers: {check(vs_fairchem >= 20)} ({vs_fairchem:.1f}x)")
    print(f"target: mrec 2 workers >= 1.6x 1 worker: {check(vs_one >= 1.6)} ({vs_one:.2f}x)")
    print(f"target: a worker's own memory at 4x <= 1.2x 1x: {check(own <= 1.2)} ({own:.2f}x)")
    stops, lost, repeated = resumes
    print(f"target: resumed at {len(stops)} stop points (2 workers, then 1), 0 structures lost or repeated: "
          f"{check(lost == repeated == 0)} ({lost} lost, {repeated} repeated; stops {stops})")
    print(f"tensors=torch / tensors=numpy: {vs_numpy:.2f}x through the loader, {torch_in_process:.2f}x in one process")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
