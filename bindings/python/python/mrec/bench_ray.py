"""``python -m mrec.bench_ray``: the sharded rehearsal of docs/scale.md.

Writes ASE-LMDB shards with ase-db-backends (molecules of 8 to 64 atoms:
positions, forces, energy, a zero cell, key-value pairs, as ``mrec import
bench`` does), then measures, medians of ``--runs``:

- conversion, timed from submission to the manifest written (after
  ``ray.init``): ``mrec.ray.import_ase`` on a local Ray of 2 CPUs against
  one serial ``mrec import aselmdb`` of the same shards (its default
  threads), and of 1 CPU against ``mrec import aselmdb --threads 1``;
- each import task's peak memory (VmHWM, reset when the task starts) on a
  shard of 1x and of 4x the rows, and its growth over the task's start;
- ``mrec.ray.read(unit="frame")`` of the result in frames/s, beside one
  process's ``Structures`` batches (in order, 4,096 at a time as a read
  task does; and shuffled batches of 64);
- opening a set of 1,000 small shards with its manifest (and without).

Needs ``mrec[ray]``, ase and ase-db-backends, and the ``mrec`` command
(``--mrec``, default ``$MREC_BIN`` or ``mrec`` on ``PATH``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np


def write_shard(args: Tuple[str, int, int]) -> str:
    """One ASE-LMDB shard of ``rows`` molecules, written by ase-db-backends."""
    import ase.db
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator

    path, rows, seed = args
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(seed)
    temp = path + ".writing"
    if os.path.exists(temp):
        os.remove(temp)
    with ase.db.connect(temp, type="aselmdb", append=False) as db:
        for i in range(rows):
            n = int(rng.integers(8, 65))
            a = Atoms(numbers=rng.choice([1, 6, 7, 8, 9, 16], n), positions=rng.normal(scale=3.0, size=(n, 3)))
            a.calc = SinglePointCalculator(a, energy=float(rng.normal() * 50), forces=rng.normal(size=(n, 3)))
            db.write(a, key_value_pairs={"sid": seed * 10_000_000 + i, "source": "bench"})
    os.replace(temp, path)
    return path


def median(xs: List[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def timed(runs: int, f: Callable[[], Any]) -> List[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        out.append(time.perf_counter() - start)
    return out


def machine() -> Dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": model, "python": platform.python_version(), "load": [round(x, 2) for x in load]}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mrec.bench_ray", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where the shards and sets go (kept; default: a temporary directory, deleted)")
    ap.add_argument("--rows", type=int, default=200_000, help="structures in all (default 200,000)")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mrec", default=os.environ.get("MREC_BIN") or shutil.which("mrec"))
    ap.add_argument("--json", help="also write every figure here")
    args = ap.parse_args(argv)
    if not args.mrec:
        ap.error("the mrec command is needed (--mrec or $MREC_BIN)")
    import ray

    import mrec
    import mrec.ray

    work = args.dir or tempfile.mkdtemp(prefix="mrec-bench-ray-")
    src = os.path.join(work, "aselmdb")
    os.makedirs(src, exist_ok=True)
    per = args.rows // args.shards
    jobs = [(os.path.join(src, f"data{k:04d}.aselmdb"), per, k + 1) for k in range(args.shards)]
    big = os.path.join(work, "big4x", "data4x.aselmdb")
    os.makedirs(os.path.dirname(big), exist_ok=True)
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(write_shard, jobs + [(big, 4 * per, 99)])
    print(f"shards: {args.shards} x {per} rows and one of {4 * per} (ase-db-backends), "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    shards = [j[0] for j in jobs]
    total = per * args.shards
    fig: Dict[str, Any] = {"machine": machine(), "rows": total, "shards": args.shards, "rows_per_shard": per,
                           "source_bytes": sum(os.path.getsize(p) for p in shards)}
    serial_out = os.path.join(work, "serial.mrec.lmdb")

    def serial(threads: Optional[int]) -> Callable[[], None]:
        extra = ["--threads", str(threads)] if threads else []
        return lambda: subprocess.run([args.mrec, "import", "aselmdb", "--quiet", "--overwrite", *extra, *shards, serial_out],
                                      check=True, capture_output=True)

    out = os.path.join(work, "set")

    def through_ray(threads: int) -> Callable[[], None]:
        return lambda: mrec.ray.import_ase(src, out, overwrite=True, threads=threads)

    for cpus, threads in ((2, None), (1, 1)):
        t_serial = timed(args.runs, serial(threads))
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            # The first job after ray.init also starts the worker processes.
            cold = timed(1, through_ray(1))[0]
            t_ray = timed(args.runs, through_ray(1))
            if cpus == 1:
                peaks = {}
                for label, path in (("1x", shards[0]), ("4x", big)):
                    task = ray.remote(num_cpus=1, max_retries=0)(_peak_task)
                    peaks[label] = ray.get(task.remote(path, os.path.join(work, f"peak-{label}.mrec.lmdb")))
                fig["task_peak"] = peaks
        finally:
            ray.shutdown()
        key = f"cpus{cpus}"
        fig[key] = {"serial_s": t_serial, "ray_s": t_ray, "ray_cold_s": cold,
                    "serial_median_s": median(t_serial), "ray_median_s": median(t_ray),
                    "ratio": median(t_serial) / median(t_ray), "ray_rows_per_s": total / median(t_ray)}
        print(f"{key}: serial {median(t_serial):.2f} s, ray {median(t_ray):.2f} s (cold {cold:.2f} s), "
              f"ratio {fig[key]['ratio']:.2f}", file=sys.stderr)
    fig["set_bytes"] = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".mrec.lmdb"))
    fig["reads"] = read_figures(out, args.runs)
    fig["open_1000"] = open_many(work, serial_out, args.runs)
    print(table(fig))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(fig, f, indent=2)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _peak_task(source: str, out: str) -> Dict[str, Any]:
    """One import task with its peak resident memory measured from its
    start (VmHWM reset through /proc/self/clear_refs, Linux)."""
    from mrec import _native

    def status(key: str) -> int:
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith(key)).split()[1])

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    before = status("VmRSS:")
    report = _native.import_aselmdb([source], out, threads=1, overwrite=True)
    peak = status("VmHWM:")
    return {"rows": report["rows"], "secs": report["secs"], "peak_kib": peak, "start_kib": before, "growth_kib": peak - before}


def read_figures(out: str, runs: int) -> Dict[str, Any]:
    """``mrec.ray.read(unit="frame")`` of the set against one process's
    Structures."""
    import ray

    import mrec
    import mrec.ray

    st = mrec.Structures(out)
    n = len(st)

    def in_order() -> None:
        for a in range(0, n, 4096):
            st.batch(range(a, min(n, a + 4096)))

    order = np.random.default_rng(0).permutation(n)

    def shuffled() -> None:
        for a in range(0, min(n, 64 * 500), 64):
            st.batch(order[a : a + 64])

    t_order = timed(runs, in_order)
    t_shuffled = timed(runs, shuffled)
    figs: Dict[str, Any] = {"frames": n, "structures_in_order_per_s": n / median(t_order),
                            "structures_shuffled64_per_s": min(n, 64 * 500) / median(t_shuffled)}
    for cpus in (1, 2):
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            from ray.data import DataContext

            DataContext.get_current().enable_progress_bars = False

            def through_ray() -> None:
                seen = 0
                for batch in mrec.ray.read(out, unit="frame").iter_batches(batch_size=None, batch_format="pyarrow"):
                    seen += batch.num_rows
                assert seen == n

            timed(1, through_ray)  # workers started
            t = timed(runs, through_ray)
        finally:
            ray.shutdown()
        figs[f"ray_read_cpus{cpus}_per_s"] = n / median(t)
    return figs


def open_many(work: str, one: str, runs: int) -> Dict[str, Any]:
    """1,000 small shards (copies of one small collection) opened with
    their manifest, and without."""
    import mrec
    from mrec import _native

    d = os.path.join(work, "many")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    small = os.path.join(work, "small.mrec.lmdb")
    with mrec.Writer(small, units={"length": "angstrom", "energy": "eV"}, overwrite=True) as w:
        rng = np.random.default_rng(1)
        for r in range(10):
            w.append(trajectory={"step": np.arange(2), "meta": {"pe": rng.normal(size=2)},
                                 "blocks": {"atoms": {"columns": {"x": rng.normal(size=(2, 3))}}}})
    files = []
    for k in range(1000):
        p = os.path.join(d, f"part-{k:05d}.mrec.lmdb")
        shutil.copyfile(small, p)
        files.append(p)
    _native.write_manifest(files, d)
    with_manifest = timed(runs, lambda: len(mrec.open(d)))
    os.rename(os.path.join(d, "mrec-set.json"), os.path.join(work, "many.json"))
    without = timed(max(1, runs // 2), lambda: len(mrec.open(d)))
    os.rename(os.path.join(work, "many.json"), os.path.join(d, "mrec-set.json"))
    return {"shards": 1000, "with_manifest_s": median(with_manifest), "without_manifest_s": median(without)}


def table(f: Dict[str, Any]) -> str:
    m = f["machine"]
    lines = [
        f"machine: {m['cpus']} cpus ({m['cpu']}), Python {m['python']}, load average {m['load']}",
        f"rehearsal: {f['rows']:,} structures in {f['shards']} ASE-LMDB shards ({f['source_bytes'] / 2**20:.0f} MiB), "
        f"set {f['set_bytes'] / 2**20:.0f} MiB",
        "conversion (median s)            serial   ray    ratio  ray rows/s   ray cold",
    ]
    for key, what in (("cpus2", "2 CPUs vs mrec import aselmdb"), ("cpus1", "1 CPU vs --threads 1")):
        c = f[key]
        lines.append(f"  {what:<30} {c['serial_median_s']:6.2f} {c['ray_median_s']:6.2f}  {c['ratio']:5.2f}  "
                     f"{c['ray_rows_per_s']:10.0f}  {c['ray_cold_s']:6.2f}")
    p = f["task_peak"]
    lines.append(f"task peak (MiB): 1x {p['1x']['peak_kib'] / 1024:.1f} (growth {p['1x']['growth_kib'] / 1024:.1f}), "
                 f"4x {p['4x']['peak_kib'] / 1024:.1f} (growth {p['4x']['growth_kib'] / 1024:.1f}); "
                 f"4x/1x {p['4x']['peak_kib'] / p['1x']['peak_kib']:.2f}")
    r = f["reads"]
    lines.append(f"frames/s: ray read(unit='frame') 1 CPU {r['ray_read_cpus1_per_s']:,.0f}, 2 CPUs "
                 f"{r['ray_read_cpus2_per_s']:,.0f}; Structures in one process: in order {r['structures_in_order_per_s']:,.0f}, "
                 f"shuffled batches of 64 {r['structures_shuffled64_per_s']:,.0f}")
    o = f["open_1000"]
    lines.append(f"open 1,000 shards: {o['with_manifest_s'] * 1000:.0f} ms with the manifest, "
                 f"{o['without_manifest_s'] * 1000:.0f} ms without")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
