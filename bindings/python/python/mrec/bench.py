"""``python -m mrec.bench FILE``: how fast Python reads a collection.

Figures (frames per second, median of ``--passes`` passes after one
warm-up pass, every pass over one shuffled record order):

- ``c[r]``: one record at a time, shuffled;
- ``c.batch(64)``: the shuffled order in batches of ``--batch`` records;
- ``pool(2) c.batch(64)``: the same batches shared by a ``multiprocessing``
  pool of ``--workers`` processes (fork), started and warmed before timing;
- ``peer: ASE-LMDB rows``: with ``--peer FILE`` (``peer.ase.lmdb`` of
  ``mrec bench --keep``), the same frames read the way an ASE-LMDB loader
  reads them: one zlib-compressed JSON row per frame through the ``lmdb``
  package, positions and forces into NumPy;
- ``peer: ase.db aselmdb``: the same file through ASE itself
  (``ase-db-backends``), ``row.toatoms()`` per frame, on the first
  ``--ase-records`` records of the order (it is slow).

Then the structures (``_bench_frames``, unless ``--no-structures``):
``c.frames(256)``, ``Structures`` batches of 64, the peers a training
loader uses instead (ASE-LMDB's ``row.toatoms()`` with ``--peer``, Lance's
``take()`` when ``pylance`` is installed), ``get_atoms`` against ASE's own
construction, one and two worker processes, a worker's memory at 1x and
4x the records, and frames of long trajectories whose blocks carry
forward; each target's verdict last.

A workload: ``target/release/mrec bench --records 2000 --keep --dir D``
leaves ``D/bench.mrec.lmdb`` and ``D/peer.ase.lmdb``. ``--rust-json`` takes
that run's ``--json`` file and prints each figure against the Rust
owned-arrays read (figure (2)).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import mrec

from . import _bench_frames

_POOL_COLLECTION: Optional[mrec.Collection] = None


def _pool_batch(indices: Sequence[int]) -> int:
    assert _POOL_COLLECTION is not None
    return int(_POOL_COLLECTION.batch(indices)["trajectory"]["n_frames"])


def _timed(passes: int, run: Callable[[], int]) -> Tuple[List[float], int]:
    """Frames/s of each timed pass (one untimed warm-up first)."""
    frames = run()
    rates = []
    for _ in range(passes):
        start = time.perf_counter()
        n = run()
        rates.append(n / (time.perf_counter() - start))
        assert n == frames, "every pass reads the same frames"
    return rates, frames


def _rust_owned(path: Optional[str]) -> Optional[float]:
    """Figure (2) of an `mrec bench --json` file: the median frames/s of the
    shuffled owned-arrays read."""
    if not path:
        return None
    with open(path) as f:
        doc = json.load(f)
    return float(doc["read_owned_arrays"]["frames_per_s"]["median"])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mrec.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a collection (e.g. bench.mrec.lmdb of `mrec bench --keep`)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--peer", help="peer.ase.lmdb of `mrec bench --keep`")
    parser.add_argument("--ase-records", type=int, default=300,
                        help="records of the ase.db peer's passes (it is slow)")
    parser.add_argument("--rust-json", help="the `mrec bench --json` file of the same workload")
    parser.add_argument("--ase-frames", type=int, default=3000,
                        help="frames of the row.toatoms() peer's passes (it is slow)")
    parser.add_argument("--atoms-frames", type=int, default=5000,
                        help="frames of the get_atoms passes")
    parser.add_argument("--memory-4x",
                        help="a workload of 4x the records (mrec bench --records 4N --keep), for the "
                             "worker's memory at 1x and 4x (else 1/4 and all of FILE's records)")
    parser.add_argument("--no-structures", dest="structures", action="store_false",
                        help="only the records' figures")
    parser.add_argument("--no-carry-forward", dest="carry_forward", action="store_false",
                        help="without the long-trajectory measurement")
    args = parser.parse_args(argv)

    c = mrec.open(args.file)
    order = list(range(len(c)))
    random.Random(args.seed).shuffle(order)
    batches = [order[i : i + args.batch] for i in range(0, len(order), args.batch)]
    rows: List[Tuple[str, List[float]]] = []

    native = c._reader()
    rates, _ = _timed(args.passes, lambda: int(native._rust_owned_arrays(order)))
    rust_here = statistics.median(rates)
    rows.append(("Rust record_arrays (figure (2)), here", rates))

    def one_by_one() -> int:
        n = 0
        for r in order:
            t = c[r]["trajectory"]
            n += 0 if t is None else t["n_frames"]
        return n

    rates, frames = _timed(args.passes, one_by_one)
    rows.append(("c[r], shuffled", rates))

    def batched() -> int:
        return sum(int(c.batch(b)["trajectory"]["n_frames"]) for b in batches)

    rates, _ = _timed(args.passes, batched)
    rows.append((f"c.batch({args.batch}), shuffled", rates))

    global _POOL_COLLECTION
    _POOL_COLLECTION = c
    ctx = mp.get_context("fork")
    with ctx.Pool(args.workers) as pool:
        pool.map(_pool_batch, batches[: args.workers * 2])  # start and open in each worker

        def pooled() -> int:
            return sum(pool.map(_pool_batch, batches, chunksize=1))

        rates, _ = _timed(args.passes, pooled)
    _POOL_COLLECTION = None
    rows.append((f"pool({args.workers}) c.batch({args.batch}), fork", rates))

    if args.peer:
        rates = _peer(args.peer, c, order, args.passes)
        if rates is not None:
            rows.append(("peer: ASE-LMDB rows, lmdb + zlib + json", rates))
        sub = order[: args.ase_records]
        rates = _peer_ase(args.peer, c, sub, args.passes)
        if rates is not None:
            rows.append((f"peer: ase.db aselmdb, {len(sub)} records", rates))

    rust_json = _rust_owned(args.rust_json)
    print(f"mrec {mrec.__version__}: {args.file}: {len(c):,} records, {frames:,} frames, "
          f"{args.passes} passes (median, min, max), Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'figure (frames/s)':<42} {'median':>12} {'min':>12} {'max':>12} {'/ Rust (2)':>11}")
    for name, rates in rows:
        median = statistics.median(rates)
        print(f"{name:<42} {median:>12,.0f} {min(rates):>12,.0f} {max(rates):>12,.0f} "
              f"{median / rust_here:>10.2f}x")
    if rust_json:
        print(f"{'Rust (2) of mrec bench --json (other run)':<42} {rust_json:>12,.0f}")
    med = {name: statistics.median(rates) for name, rates in rows}
    batch = med[f"c.batch({args.batch}), shuffled"]
    single = med["c[r], shuffled"]
    check = lambda ok: "ok" if ok else "MISSED"  # noqa: E731
    print(f"targets: c.batch >= 500,000: {check(batch >= 500_000)}; "
          f"c.batch >= 0.5x Rust (2): {check(batch >= 0.5 * rust_here)}; "
          f"c[r] >= 100,000: {check(single >= 100_000)}")
    print("(Rust (2) is measured in this process, in the same passes' conditions: "
          "`record_arrays` of every record, nothing handed to Python)")
    if args.structures:
        for line in _bench_frames.run(args, c):
            print(f"target: {line}")
    return 0


def _peer(path: str, c: mrec.Collection, order: List[int], passes: int) -> Optional[List[float]]:
    try:
        import lmdb
    except ImportError:
        print("note: no `lmdb` package, the peer is not measured", file=sys.stderr)
        return None
    try:
        import orjson

        loads: Callable[[bytes], Any] = orjson.loads
    except ImportError:
        loads = json.loads
    first = c.index["first_frame"]
    counts = c.index["n_frames"]
    env = lmdb.open(path, subdir=False, readonly=True, lock=False, readahead=False)

    def run() -> int:
        n = 0
        with env.begin() as txn:
            for r in order:
                for j in range(int(first[r]), int(first[r] + counts[r])):
                    row = loads(zlib.decompress(txn.get(str(j + 1).encode())))
                    np.asarray(row["numbers"])
                    np.asarray(row["positions"], dtype=np.float64)
                    np.asarray(row["forces"], dtype=np.float64)
                    n += 1
        return n

    rates, _ = _timed(passes, run)
    env.close()
    return rates


def _peer_ase(path: str, c: mrec.Collection, order: List[int], passes: int) -> Optional[List[float]]:
    """The same frames through ASE itself (``ase.db.connect(type="aselmdb")``
    of the ``ase-db-backends`` package, read-only, as ML loaders open it):
    a row per frame, ``toatoms()``, positions and forces."""
    db = _bench_frames.open_ase_peer(path)
    if db is None:
        return None
    first = c.index["first_frame"]
    counts = c.index["n_frames"]

    def run() -> int:
        n = 0
        for r in order:
            for j in range(int(first[r]), int(first[r] + counts[r])):
                atoms = db._get_row(j + 1).toatoms()
                atoms.get_positions()
                atoms.get_forces()
                n += 1
        return n

    rates, _ = _timed(passes, run)
    return rates


if __name__ == "__main__":
    raise SystemExit(main())
