"""Sharded sets on Ray Data (``pip install "mrec[ray]"``; the rest of
``mrec`` works without Ray). docs/shards.md says more.

- :func:`read`: a collection or a sharded set as a ``ray.data.Dataset``,
  one row per record (``unit="record"``) or per frame as a structure
  (``unit="frame"``, :class:`mrec.Structures`' arrays), in blocks of Arrow
  columns made from the arrays the Rust reader gathers. Read tasks cover
  (shard, range) and open their shard only.
- :func:`write`: record rows into a sharded set, one shard per write task
  (the library's writer), the manifest written last, after every shard
  committed; a failed or cancelled job leaves no manifest (the directory
  holds a pending marker and does not open as a set) and its shards are
  removed.
- :func:`import_ase`: ASE-LMDB shards (FairChem's ``*.aselmdb``) and any
  file ASE reads, one Ray task per source shard running the importer of
  ``mrec import aselmdb``, each writing one shard; the reports merged; the
  manifest last.

A task lost with its node (or its worker) runs again elsewhere, up to
``max_retries`` times (:data:`MAX_RETRIES`); an error a task raises (a bad
source, a refusal, a full disk) is not retried and fails the job. Each
attempt writes under a hidden name of its own, and the driver installs
the shards once the manifest is in place (docs/scale.md, "Lost nodes,
full disks").

On a cluster: ``ray start --head`` on one machine, ``ray start
--address=HEAD:6379`` on the others, ``ray.init(address="auto")`` in the
driver; the sources and the output directory on a file system every node
mounts. One command converts a directory of shards::

    python -m mrec.ray import train/ train-set/ [--address auto] [--group-by KEY ...]
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

try:
    import ray
    import ray.data
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError('mrec.ray needs Ray Data: pip install "mrec[ray]" (ray[data] and pyarrow)') from e

import argparse
import sys
import warnings

from . import _ray_io
from ._ase_import import ImportReport
from ._collection import Collection, PathLike
from ._paths import expand

__all__ = ["read", "write", "import_ase", "MAX_RETRIES"]

#: How often a task lost with its node or worker runs again, by default
#: (``max_retries=`` of :func:`read`, :func:`write`, :func:`import_ase`).
#: An error the task raises (its data's) is never retried.
MAX_RETRIES = 3


def read(
    source: Union[PathLike, Sequence[PathLike], Collection],
    unit: str = "record",
    *,
    keys: Optional[Sequence[str]] = None,
    extra: Sequence[str] = (),
    checked: bool = False,
    block_rows: Optional[int] = None,
    max_retries: int = MAX_RETRIES,
    **read_args: Any,
) -> "ray.data.Dataset":
    """A collection or sharded set (what :func:`mrec.open` takes) as a Ray
    dataset. ``unit="record"``: a row per record (its number ``record``,
    ``meta`` as JSON text, per-frame lists of its steps, per-step keys, each
    declared trajectory column's rows, the cell, its system; the layout is
    in ``mrec._arrow``). ``unit="frame"``: a row per frame as a structure,
    the outputs ``keys`` and ``extra`` of :class:`mrec.Structures` (chosen
    once for the set), plus ``index``, ``record`` and ``frame``.
    ``block_rows``: rows per block (1,024 records, 4,096 frames);
    ``max_retries``: how often a read task lost with its node (or worker)
    runs again (:data:`MAX_RETRIES`); ``read_args`` go to
    ``ray.data.read_datasource`` (e.g. ``override_num_blocks``,
    ``concurrency``)."""
    source_ = _ray_io.SetDatasource(source, unit=unit, keys=keys, extra=extra, checked=checked, block_rows=block_rows)
    remote_args = _retries(read_args, max_retries)
    with warnings.catch_warnings():
        # Ray 2.60 deprecates `ray_remote_args` of reads in favour of named
        # parameters, but has none for `max_retries`.
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        return ray.data.read_datasource(source_, ray_remote_args=remote_args, **read_args)


def _retries(args: Dict[str, Any], max_retries: int) -> Dict[str, Any]:
    """``args``' ``ray_remote_args`` (taken out of it) with ``max_retries``
    (Ray Data's own default retries a lost task without end)."""
    if max_retries < 0:
        raise ValueError(f"max_retries must be 0 or more, not {max_retries}")
    return {"max_retries": max_retries, **(args.pop("ray_remote_args", None) or {})}


def write(
    dataset: "ray.data.Dataset",
    out_dir: PathLike,
    *,
    like: Union[PathLike, Collection, None] = None,
    units: Optional[Mapping[str, Any]] = None,
    schema: Optional[Mapping[str, Any]] = None,
    meta: Optional[Mapping[str, Any]] = None,
    forcefield: Optional[Mapping[str, Any]] = None,
    overwrite: bool = False,
    prefix: str = "part",
    max_retries: int = MAX_RETRIES,
    **write_args: Any,
) -> str:
    """Writes record rows (what :func:`read` with ``unit="record"`` gives)
    as a sharded set in ``out_dir``: one shard per write task
    (``<prefix>-<job>-<task>.mrec.lmdb``), the manifest last; returns the
    manifest's path. The declaration: ``units`` and ``schema`` (a
    ``sequence_schema``), or those of ``like`` (a collection or set);
    ``meta`` is every shard's collection document besides ``units``.
    Shards are in the order of the write tasks (set Ray's
    ``DataContext.execution_options.preserve_order`` to keep the dataset's
    order). ``max_retries``: how often a task lost with its node (or
    worker) runs again (:data:`MAX_RETRIES`; an error of the data, such as
    a refusal or a full disk, is not retried: the job fails).
    ``write_args`` go to ``Dataset.write_datasink``. A previous set in
    ``out_dir`` (with ``overwrite=True``) stays whole and readable until
    the new manifest replaces it; a job that fails leaves it so."""
    if like is not None:
        c = like if isinstance(like, Collection) else Collection(like)
        units = units if units is not None else c.units
        schema = schema if schema is not None else c.schema
        forcefield = forcefield if forcefield is not None else c.forcefield
    if units is None or schema is None:
        raise ValueError("mrec.ray.write needs units and schema, or like= a collection to take them from")
    private = {k: write_args.pop(k) for k in list(write_args) if k.startswith("_")}
    sink = _ray_io.SetDatasink(
        os.fspath(out_dir), units, schema, meta=meta, forcefield=forcefield, overwrite=overwrite, prefix=prefix, **private
    )
    remote_args = _retries(write_args, max_retries)
    dataset.write_datasink(sink, ray_remote_args=remote_args, **write_args)
    assert sink.manifest is not None, "on_write_complete wrote the manifest"
    return sink.manifest


def _sources(sources: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    """Files, directories (their ``*.aselmdb``, sorted) and glob patterns,
    in order."""
    items = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    out: List[str] = []
    for item in items:
        out.extend(expand(os.fspath(item), "*.aselmdb"))
    if not out:
        raise ValueError("import_ase needs at least one source")
    return out


def import_ase(
    sources: Union[PathLike, Sequence[PathLike]],
    out_dir: PathLike,
    *,
    group_by: Optional[str] = None,
    order_by: Optional[str] = None,
    index_columns: Sequence[str] = (),
    skip_bad: bool = False,
    overwrite: bool = False,
    num_cpus: float = 1,
    threads: int = 1,
    format: Optional[str] = None,
    max_retries: int = MAX_RETRIES,
) -> ImportReport:
    """Converts ASE-LMDB shards (``*.aselmdb``: a directory of them, a glob
    pattern, a list) and any file ASE reads into a sharded set in
    ``out_dir``: one Ray task per source (``num_cpus`` each; ``threads``
    reader threads in it) running the importer of ``mrec import aselmdb``
    (its mapping, refusals and report), each writing
    ``<source name>.mrec.lmdb``; then the manifest, last. ``group_by``
    groups rows within each source. Returns the reports merged (per source
    lines, counts added). A task lost with its node (or worker) runs
    again, up to ``max_retries`` times (:data:`MAX_RETRIES`). A task that
    fails (its source: :class:`mrec.BadInput`, :class:`mrec.Refused`; a
    full disk: ``OSError``) is not retried and stops the job: tasks not
    started do nothing, running ones are interrupted, and once every task
    has ended the files written are removed; no manifest is written, and
    a previous set in ``out_dir`` (``overwrite=True``) is left whole."""
    files = _sources(sources)
    out_dir = os.path.abspath(os.fspath(out_dir))
    outputs = [os.path.join(out_dir, _ray_io.shard_name(f)) for f in files]
    twice = {o for o in outputs if outputs.count(o) > 1}
    if twice:
        raise ValueError(f"sources that would write the same shard: {sorted(twice)}")
    retries = _retries({}, max_retries)
    job = _ray_io.new_job()
    _ray_io.start_set(out_dir, job, overwrite)
    options: Dict[str, Any] = {
        "group_by": group_by,
        "order_by": order_by,
        "index_columns": list(index_columns),
        "skip_bad": skip_bad,
        "threads": int(threads),
        "format": format,
        "job": job,
        "stop": _ray_io.stop_path(out_dir, job),
    }
    # Ray retries a task whose worker or node died (a system failure), not
    # one that raised (the data's failure).
    task = ray.remote(num_cpus=num_cpus, retry_exceptions=False, **retries)(_ray_io.import_one)
    refs = [task.remote(os.path.abspath(f), o, options) for f, o in zip(files, outputs)]
    try:
        reports = ray.get(refs)
    except BaseException:
        _ray_io.stop_tasks(options["stop"], refs)
        _ray_io.fail_set(out_dir, job)
        raise
    try:
        _ray_io.finish_set(
            out_dir, job, [(r["file"], o) for r, o in zip(reports, outputs)], [r.get("xxh3_128") for r in reports]
        )
    except BaseException:
        _ray_io.fail_set(out_dir, job)
        raise
    return _merged(reports, out_dir)


def _merged(reports: List[Dict[str, Any]], out_dir: str) -> ImportReport:
    """The reports of every task as one."""
    counts: Dict[str, Dict[str, int]] = {k: {} for k in ("mapped", "changed", "kept", "dropped")}
    for r in reports:
        for section in counts:
            for what, n in r.get(section, {}).items():
                counts[section][what] = counts[section].get(what, 0) + n
    head = (
        f"imported {sum(r['rows'] for r in reports)} of {sum(r['rows_read'] for r in reports)} rows "
        f"from {len(reports)} sources into the set {out_dir}: {sum(r['records'] for r in reports)} "
        f"records, {sum(r['frames'] for r in reports)} frames, one shard per source\n"
    )
    return ImportReport(
        text=head + "".join(r["text"] for r in reports),
        records=sum(r["records"] for r in reports),
        frames=sum(r["frames"] for r in reports),
        rows=sum(r["rows"] for r in reports),
        rows_read=sum(r["rows_read"] for r in reports),
        dropped_samples=[s for r in reports for s in r.get("dropped_samples", [])][:10],
        secs=max((r.get("secs", 0.0) for r in reports), default=0.0),
        **counts,
    )


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m mrec.ray import SOURCES... OUT_DIR``: :func:`import_ase`
    on the Ray cluster at ``--address`` (default: a local one)."""
    ap = argparse.ArgumentParser(prog="python -m mrec.ray", description="Sharded sets on Ray Data (docs/shards.md).")
    sub = ap.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="ASE-LMDB shards (or files ASE reads) into a sharded set, one task per source")
    imp.add_argument("paths", nargs="+", help="sources (files, directories of *.aselmdb, patterns), then the output directory")
    imp.add_argument("--address", help='the Ray cluster ("auto" for the one this machine joined; default: a local one)')
    imp.add_argument("--group-by")
    imp.add_argument("--order-by")
    imp.add_argument("--index-column", action="append", default=[], dest="index_columns")
    imp.add_argument("--skip-bad", action="store_true")
    imp.add_argument("--overwrite", action="store_true")
    imp.add_argument("--num-cpus", type=float, default=1, help="CPUs per task (default 1)")
    imp.add_argument("--threads", type=int, default=1, help="reader threads per task (default 1)")
    imp.add_argument(
        "--max-retries", type=int, default=MAX_RETRIES, help=f"runs again of a task lost with its node (default {MAX_RETRIES})"
    )
    args = ap.parse_args(argv)
    if len(args.paths) < 2:
        ap.error("give the sources, then the output directory")
    ray.init(address=args.address, log_to_driver=False)
    report = import_ase(
        args.paths[:-1],
        args.paths[-1],
        group_by=args.group_by,
        order_by=args.order_by,
        index_columns=args.index_columns,
        skip_bad=args.skip_bad,
        overwrite=args.overwrite,
        num_cpus=args.num_cpus,
        threads=args.threads,
        max_retries=args.max_retries,
    )
    print(report, end="")
    print(f"took {report.secs:.1f} s in the slowest task", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
