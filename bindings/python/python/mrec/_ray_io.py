"""What ``mrec.ray`` runs on Ray (imported by it only, so that ``mrec``
never imports Ray): the read :class:`SetDatasource`, the
:class:`SetDatasink`, one import task per source shard, and the output
directory's life (a pending marker while a set is written, the manifest
last, this job's files removed when it fails).

The read tasks, the write tasks and the import tasks are module-level
functions and small picklable objects: a task carries its shard's path and
range, not the whole set.
"""

from __future__ import annotations

import _thread
import functools
import glob
import json
import math
import os
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import pyarrow as pa
import ray
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

from . import _native
from ._arrow import RecordLayout, layout_of_table, records_from_table, records_table, structures_table
from ._collection import Collection
from ._structures import Structures

MANIFEST = "mrec-set.json"
PENDING = "mrec-set.pending"
#: Rows per block a read task yields, by unit.
BLOCK_ROWS = {"record": 1024, "frame": 4096}


# -- reading -------------------------------------------------------------------


def _read_records(path: str, lo: int, hi: int, first_record: int, layout: RecordLayout, block_rows: int, checked: bool) -> Iterator[pa.Table]:
    """Records ``lo:hi`` of one shard as record rows (numbered in the set)."""
    c = Collection(path, checked=checked)
    try:
        flags = c._reader().binding_index()["has_trajectory"]
        for a in range(lo, hi, block_rows):
            b = min(hi, a + block_rows)
            yield records_table(c.batch(range(a, b)), first_record, flags[a:b], layout)
    finally:
        c.close()


def _read_frames(
    path: str, lo: int, hi: int, first_frame: int, first_record: int, keys: Sequence[str], extra: Sequence[str], block_rows: int, checked: bool
) -> Iterator[pa.Table]:
    """Frames ``lo:hi`` of one shard as structure rows (numbered in the set)."""
    st = Structures(path, keys=list(keys), extra=list(extra), checked=checked)
    try:
        for a in range(lo, hi, block_rows):
            batch = st.batch(range(a, min(hi, a + block_rows)))
            yield structures_table(batch, st._kinds, {"index": first_frame, "record": first_record})
    finally:
        for c in st.collections:
            c.close()


class SetDatasource(Datasource):
    """A collection or sharded set as a Ray Data source: read tasks over
    (shard, range of records or frames), each opening its shard only."""

    def __init__(
        self,
        source: Any,
        unit: str = "record",
        keys: Optional[Sequence[str]] = None,
        extra: Sequence[str] = (),
        checked: bool = False,
        block_rows: Optional[int] = None,
    ) -> None:
        super().__init__()
        if unit not in ("record", "frame"):
            raise ValueError(f"unit must be 'record' or 'frame', not {unit!r}")
        c = source if isinstance(source, Collection) else Collection(source, checked=checked)
        self._unit = unit
        self._checked = checked
        self._block_rows = int(block_rows or BLOCK_ROWS[unit])
        self._ranges = c.shard_ranges()
        self._bytes = sum(b for _, _, _, b in c._parts[0]) if c._parts is not None else os.path.getsize(c.path)
        self._layout: Optional[RecordLayout] = None
        self._keys: Tuple[str, ...] = ()
        self._extra = tuple(extra)
        if unit == "record":
            self._layout = RecordLayout.of(c)
        else:
            # Chosen once for the set, so that every read task's blocks
            # have the same columns.
            st = Structures(c, keys=keys, extra=extra)
            self._keys = tuple(st.keys)

    def get_name(self) -> str:
        return f"mrec.read({self._unit})"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return self._bytes

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None, data_context: Any = None) -> List[ReadTask]:
        record_unit = self._unit == "record"
        total = sum(r[2] if record_unit else r[4] for r in self._ranges)
        per_task = max(1, math.ceil(total / max(1, parallelism)))
        tasks = []
        for path, first_record, n_records, first_frame, n_frames in self._ranges:
            n = n_records if record_unit else n_frames
            for lo in range(0, n, per_task):
                hi = min(n, lo + per_task)
                if record_unit:
                    read = functools.partial(_read_records, path, lo, hi, first_record, self._layout, self._block_rows, self._checked)
                else:
                    read = functools.partial(
                        _read_frames, path, lo, hi, first_frame, first_record, self._keys, self._extra, self._block_rows, self._checked
                    )
                share = (hi - lo) / max(1, total)
                meta = BlockMetadata(num_rows=hi - lo, size_bytes=int(self._bytes * share), input_files=[path], exec_stats=None)
                tasks.append(ReadTask(read, meta, per_task_row_limit=per_task_row_limit))
        return tasks


# -- the output directory ------------------------------------------------------
#
# A job's tasks never write a shard's name: each attempt of a task (Ray runs
# a task again when its node is lost) writes under a hidden name of its own,
# ``.<job>.<attempt>.<shard>`` (the library's writer adds ``.partial`` until
# it commits), and hands that name to the driver. An attempt whose node was
# lost may still be running (a node Ray declared dead that keeps going until
# it learns so) and holds its partial file's lock: a retry under the same
# name would meet that lock, or have its file renamed under it. Only the
# driver, which alone learns which attempt of each task returned, installs
# shards: the manifest first (listing the shards' names), then one rename
# per shard, then what dead attempts left and the previous set's other
# shards go. Until the manifest is installed, a previous set in the
# directory is untouched and still opens.


def _attempt_files(out_dir: str, job: str) -> List[str]:
    """The hidden files of a job's attempts in ``out_dir``: shards,
    partial files, lock files, an ASE import's scratch shards."""
    return glob.glob(os.path.join(glob.escape(out_dir), f".*{job}*"))


def _job_files(out_dir: str, job: str) -> List[str]:
    """The files a job wrote in ``out_dir``: its attempts' and those named
    with its token (its stop file, a write's installed shards)."""
    return sorted(set(_attempt_files(out_dir, job) + glob.glob(os.path.join(glob.escape(out_dir), f"*{job}*"))))


def attempt_path(shard: str, job: str) -> str:
    """Where one attempt of the task that writes ``shard`` writes it: a
    hidden name of its own in the same directory (the job's token, a new
    token, the shard's name)."""
    d, name = os.path.split(shard)
    return os.path.join(d, f".{job}.{uuid.uuid4().hex[:12]}.{name}")


def remove_files(paths: Sequence[str]) -> None:
    """Removes each file, and its lock file and partial file, where they
    exist."""
    for p in paths:
        for q in (p, p + "-lock", p + ".partial", p + ".partial-lock"):
            try:
                os.remove(q)
            except FileNotFoundError:
                pass


def _manifest_shards(out_dir: str) -> List[str]:
    """The shard files the manifest in ``out_dir`` lists (none without one)."""
    try:
        with open(os.path.join(out_dir, MANIFEST)) as f:
            shards = json.load(f).get("shards", [])
    except FileNotFoundError:
        return []
    return [os.path.join(out_dir, s["file"]) for s in shards if isinstance(s, dict) and "/" not in s.get("file", "/")]


def start_set(out_dir: str, job: str, overwrite: bool) -> None:
    """Prepares ``out_dir`` for a job writing a set: refuses a finished set
    there unless ``overwrite`` (which leaves it, whole and readable, until
    the new set's manifest replaces it), removes what a failed job left
    (named in its pending marker), and leaves this job's marker, so that
    a directory without a set does not open as one until the manifest is
    written."""
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(os.path.join(out_dir, MANIFEST)) and not overwrite:
        raise FileExistsError(f"{out_dir}: holds a set already ({MANIFEST}); pass overwrite=True to replace it")
    pending = os.path.join(out_dir, PENDING)
    if os.path.exists(pending):
        try:
            with open(pending) as f:
                stale = json.load(f).get("job")
        except (OSError, ValueError):
            stale = None
        if isinstance(stale, str) and stale:
            remove_files(_job_files(out_dir, stale))
    temp = pending + f".{os.getpid()}.tmp"
    try:
        with open(temp, "w") as f:
            json.dump({"job": job, "started": time.time()}, f)
        os.replace(temp, pending)
    except BaseException:
        remove_files([temp])
        raise


def fail_set(out_dir: str, job: str) -> None:
    """Removes what ``job`` wrote and its pending marker: no shard of it
    left, a previous set as it was."""
    remove_files([p for p in _job_files(out_dir, job) if not p.endswith(PENDING)])
    try:
        with open(os.path.join(out_dir, PENDING)) as f:
            ours = json.load(f).get("job") == job
    except (OSError, ValueError):
        ours = False
    if ours:
        os.remove(os.path.join(out_dir, PENDING))


def finish_set(
    out_dir: str,
    job: str,
    shards: Sequence[Tuple[str, str]],
    digests: Optional[Sequence[Optional[str]]] = None,
) -> str:
    """Installs the set whose shards ``(attempt file, shard path)`` the
    job's tasks wrote: the manifest first (the library opens every attempt
    file, checks that their declarations agree, keeps each shard's content
    digest as its task computed it (a shard without one is hashed here),
    installs ``mrec-set.json`` listing the shards' names by rename and
    removes the pending marker), then each attempt file renamed to its
    shard's path; then the files of dead attempts and the shards of a
    previous set that the new one does not list are removed. An error
    before the manifest is installed (a full disk) leaves a previous set
    whole."""
    if not shards:
        raise ValueError(f"{out_dir}: no shard was written (no rows): no set")
    previous = _manifest_shards(out_dir)
    names = [os.path.basename(shard) for _, shard in shards]
    manifest = os.fspath(
        _native.write_manifest(
            [os.fspath(a) for a, _ in shards], out_dir, names, None if digests is None else list(digests)
        )
    )
    for attempt, shard in shards:
        os.replace(attempt, shard)
        # Lock files go with a name, not with a file's content: the
        # attempt's (made by the manifest's reader), and one that readers
        # of a replaced shard left (new readers start their own).
        for lock in (attempt + "-lock", shard + "-lock"):
            try:
                os.remove(lock)
            except FileNotFoundError:
                pass
    kept = {os.path.abspath(shard) for _, shard in shards}
    remove_files([p for p in previous if os.path.abspath(p) not in kept])
    remove_files(_attempt_files(out_dir, job))
    return manifest


def new_job() -> str:
    """A token naming one job's files."""
    return uuid.uuid4().hex[:12]


# -- writing -------------------------------------------------------------------


class InjectedFailure(RuntimeError):
    """The failure a test asks a write task for (``_fail_after``)."""


class SetDatasink(Datasink):
    """Record rows into a sharded set: each write task (each attempt of
    one) streams its rows into a file of its own (the library's writer:
    ``.partial`` until committed), and ``on_write_complete`` installs the
    manifest, then the shards (:func:`finish_set`)."""

    def __init__(
        self,
        out_dir: str,
        units: Mapping[str, Any],
        schema: Mapping[str, Any],
        meta: Optional[Mapping[str, Any]] = None,
        forcefield: Optional[Mapping[str, Any]] = None,
        overwrite: bool = False,
        prefix: str = "part",
        _fail_after: Optional[int] = None,
    ) -> None:
        self.out_dir = os.path.abspath(os.fspath(out_dir))
        self.units = dict(units)
        self.schema = dict(schema)
        self.meta = dict(meta or {})
        self.forcefield = forcefield
        self.overwrite = overwrite
        self.prefix = prefix
        self.job = new_job()
        self.manifest: Optional[str] = None
        self._fail_after = _fail_after

    def get_name(self) -> str:
        return "mrec.write"

    def on_write_start(self, schema: Optional[pa.Schema] = None) -> None:
        start_set(self.out_dir, self.job, self.overwrite)

    def write(self, blocks: Any, ctx: Any) -> Optional[Dict[str, Any]]:
        from . import Writer

        shard = os.path.join(self.out_dir, f"{self.prefix}-{self.job}-{ctx.task_idx:05d}.mrec.lmdb")
        path = attempt_path(shard, self.job)
        writer = None
        n = 0
        try:
            for block in blocks:
                table = BlockAccessor.for_block(block).to_arrow()
                layout = layout_of_table(table.schema, self.schema)
                for record in records_from_table(table, layout):
                    if writer is None:
                        writer = Writer(
                            path, self.units, self.schema, overwrite=True, meta=self.meta, forcefield=self.forcefield, digest=True
                        )
                    writer.append(record)
                    n += 1
                    if self._fail_after is not None and ctx.task_idx == 0 and n >= self._fail_after:
                        raise InjectedFailure(f"injected: write task 0 fails after {n} records")
            if writer is None:
                return None
            digest = writer.finish()
        except BaseException:
            if writer is not None:
                writer.close()  # the partial file goes
            raise
        return {"task": int(ctx.task_idx), "file": path, "shard": shard, "records": n, "xxh3_128": digest}

    def on_write_complete(self, write_result: Any) -> None:
        done = sorted((r for r in write_result.write_returns if r), key=lambda r: r["task"])
        try:
            self.manifest = finish_set(
                self.out_dir, self.job, [(r["file"], r["shard"]) for r in done], [r.get("xxh3_128") for r in done]
            )
        except BaseException:
            fail_set(self.out_dir, self.job)
            raise

    def on_write_failed(self, error: Exception) -> None:
        fail_set(self.out_dir, self.job)


# -- importing -----------------------------------------------------------------

#: Suffixes of ASE-LMDB shards (read by the Rust importer, page-checked);
#: any other file is read by ASE (``mrec.import_files``).
ASELMDB = (".aselmdb", ".lmdb")


def stop_path(out_dir: str, job: str) -> str:
    """The file whose existence tells a job's import tasks to stop (named
    with the job's token, so that the job's cleanup removes it)."""
    return os.path.join(out_dir, f"mrec-set.{job}.stop")


def stop_tasks(stop: str, refs: Sequence[Any]) -> None:
    """Stops a failed job's import tasks and waits until every one has
    ended, so that none writes after the cleanup. Tasks watch ``stop``:
    one not yet started does nothing, a running one is interrupted at the
    importer's next check. ``ray.cancel`` is not used: cancelling a task
    whose reply is in flight fails a check in Ray's task manager that ends
    the driver (Ray 2.60, with and without ``force``)."""
    try:
        with open(stop, "w"):
            pass
    except OSError:
        pass  # (a full disk) the tasks then run to their end
    ray.wait(list(refs), num_returns=len(refs), fetch_local=False)


class _StopWatch:
    """Interrupts this process's main thread (as Ctrl-C does, which the
    importer checks between rows) once the file ``stop`` exists; polls
    every ``period`` seconds until closed."""

    def __init__(self, stop: str, period: float = 0.2) -> None:
        self.stop = stop
        self.fired = False
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(period,), name="mrec-stop-watch", daemon=True)
        self._thread.start()

    def _watch(self, period: float) -> None:
        while not self._closed.wait(period):
            if os.path.exists(self.stop):
                with self._lock:
                    if not self._closed.is_set():
                        self.fired = True
                        _thread.interrupt_main()
                return

    def close(self) -> None:
        with self._lock:
            self._closed.set()
        self._thread.join()


def import_one(source: str, shard: str, options: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """One Ray task: one source into the shard ``shard``, by the importer
    of ``mrec import aselmdb``, written under this attempt's own name
    (:func:`attempt_path`, ``options["job"]``) for the driver to install;
    returns its report as a dict, with that name as ``file``, or None
    when the job was stopped (``options["stop"]`` exists: another task
    failed)."""
    if os.path.exists(options["stop"]):
        return None
    watch = _StopWatch(options["stop"])
    out = attempt_path(shard, options["job"])
    try:
        try:
            report = _import_one(source, out, options)
        finally:
            watch.close()
    except KeyboardInterrupt:
        if watch.fired:
            return None
        raise
    # The report names the shard, not this attempt's file.
    report["text"] = report["text"].replace(os.path.basename(out), os.path.basename(shard))
    report["file"] = out
    return report


def _import_one(source: str, out: str, options: Mapping[str, Any]) -> Dict[str, Any]:
    common = {k: options[k] for k in ("group_by", "order_by", "index_columns", "skip_bad")}
    if source.endswith(ASELMDB):
        return dict(_native.import_aselmdb([source], out, threads=options["threads"], **common))
    from ._ase_import import import_files

    start = time.perf_counter()
    report = import_files([source], out, format=options.get("format"), **common)
    out_dict = dict(report.__dict__)
    out_dict["secs"] = time.perf_counter() - start
    return out_dict


def shard_name(source: str) -> str:
    """The shard a source becomes: its file name without the source's
    suffix, then ``.mrec.lmdb``."""
    name = os.path.basename(source)
    for suffix in ASELMDB + (".extxyz", ".xyz", ".db", ".traj", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name + ".mrec.lmdb"
