"""``mrec.ray`` survives a lost node. A local Ray cluster of three raylets
(``ray.cluster_utils.Cluster``: a head without CPUs, where the driver
runs, and two nodes of one CPU each); a test loses one node while a task
of ``import_ase``, ``write`` or ``read`` runs on it: early (before it wrote
anything), mid (its writer's partial file open, or a block yielded) or
late (its work done, its reply not sent). The task is frozen there
(SIGSTOP) and a child of its own keeps its files open, so that the dead
attempt's partial file stays locked as on a node cut off from the cluster
that keeps running. The job completes all the same: the set equals the
serial import, the written set its dataset, the rows read
``mrec.open``'s; nothing of the dead attempt is left. A source that
fails, and a write task that fails, are not retried; ``max_retries=0``
fails the job on a lost node, cleanly."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

ray = pytest.importorskip("ray", reason='needs Ray Data (pip install "mrec[ray]": ray[data] and pyarrow)')
pytest.importorskip("pyarrow", reason='needs pyarrow (pip install "mrec[ray]")')
pytest.importorskip("ase", reason="needs ase (pip install ase)")
pytest.importorskip("ase_db_backends", reason="needs ase-db-backends (pip install ase-db-backends)")

import ray.cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.data import DataContext  # noqa: E402
from ray.data.block import BlockAccessor  # noqa: E402

import mrec  # noqa: E402
import mrec.ray  # noqa: E402
import workers  # noqa: E402
from conftest import record_json, same  # noqa: E402
from mrec import _native, _ray_io  # noqa: E402
from test_ray import copy_sources, write_aselmdb  # noqa: E402

# The tasks below run in Ray's workers, which cannot import this module:
# its functions travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated.*:DeprecationWarning:ray.data.context")

POINTS = ["early", "mid", "late"]


@dataclass
class Pause:
    """Where one task freezes: the first to reach ``point`` on the node
    ``node``. Every attempt of a task adds a line to ``attempts``."""

    node: str
    point: str
    signal: str
    attempts: str

    def attempt(self, what: str) -> None:
        """Counts an attempt. Elsewhere than on the node, an attempt waits
        until a task froze there: the other node is then busy, and Ray
        sends the next tasks to the node."""
        with open(self.attempts, "a") as f:
            f.write(what + "\n")
        if self.point not in POINTS or ray.get_runtime_context().get_node_id() == self.node:
            return
        deadline = time.monotonic() + 60
        while not os.path.exists(self.signal) and time.monotonic() < deadline:
            time.sleep(0.01)

    def here(self, point: str, file: str = "") -> None:
        """Freezes this task if it is the first at ``point`` on the node,
        naming in ``signal`` its process, the child that keeps its files
        open, and ``file`` (the file it was writing or wrote)."""
        if point != self.point or ray.get_runtime_context().get_node_id() != self.node:
            return
        try:
            fd = os.open(self.signal + ".tmp", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # another task froze here already
        detached, said_detached = os.pipe()
        holder = os.fork()
        if holder == 0:
            # Its own session first: Ray kills a dead worker's process
            # group, which the child must outlive. Of its descriptors,
            # only the test directory's files stay open: Ray waits for the
            # task's pipes to close.
            os.setsid()
            here = os.path.dirname(self.signal)
            for name in os.listdir("/proc/self/fd"):
                try:
                    if int(name) != said_detached and not os.readlink(f"/proc/self/fd/{name}").startswith(here):
                        os.close(int(name))
                except OSError:
                    pass
            os.write(said_detached, b".")
            os.close(said_detached)
            time.sleep(300)
            os._exit(0)
        # The task freezes only once the child left its process group: on
        # a busy machine the node could otherwise be lost first.
        os.close(said_detached)
        os.read(detached, 1)
        os.close(detached)
        os.write(fd, json.dumps({"pid": os.getpid(), "holder": holder, "file": file}).encode())
        os.close(fd)
        os.rename(self.signal + ".tmp", self.signal)
        os.kill(os.getpid(), signal.SIGSTOP)


@dataclass
class Frozen:
    """A task frozen on the node: its process, the child holding its
    files, the file it was writing or wrote."""

    pid: int
    holder: int
    file: str


class Faults:
    """The cluster, and losing its second node while a task is frozen
    there (a new node takes its place for the next test)."""

    def __init__(self) -> None:
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        self.nodes = [self.cluster.add_node(num_cpus=1) for _ in range(2)]
        self.frozen: List[int] = []

    def pause(self, tmp_path: Path, point: str) -> Pause:
        while len(self.nodes) < 2:
            self.nodes.append(self.cluster.add_node(num_cpus=1))
        return Pause(self.nodes[1].node_id, point, str(tmp_path / "frozen"), str(tmp_path / "attempts"))

    def lose_node_when_frozen(
        self, pause: Pause, before: Callable[[Frozen], None] = lambda f: None, after: Callable[[Frozen], None] = lambda f: None
    ) -> "Loss":
        """In a thread: once a task froze on the node, ``before`` (what it
        left), then the node goes (its task dies, the child holding its
        files lives), then ``after``."""
        loss = Loss()

        def run() -> None:
            try:
                deadline = time.monotonic() + 120
                while not os.path.exists(pause.signal):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no task froze at {pause.point} on the node")
                    time.sleep(0.02)
                frozen = Frozen(**json.loads(Path(pause.signal).read_text()))
                self.frozen += [frozen.pid, frozen.holder]
                while _state(frozen.pid) != "T":
                    time.sleep(0.01)
                try:
                    before(frozen)
                finally:
                    # Whatever the check found, the job must go on.
                    self.cluster.remove_node(self.nodes.pop(1))
                deadline = time.monotonic() + 10
                while _state(frozen.pid) not in ("Z", "gone") and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert _state(frozen.pid) in ("Z", "gone"), "the node's task died"
                assert _state(frozen.holder) in ("R", "S"), "the child holding its files lives"
                after(frozen)
                loss.frozen = frozen
            except BaseException as e:  # noqa: BLE001 - handed to the test
                loss.error = e

        loss.thread = threading.Thread(target=run, daemon=True)
        loss.thread.start()
        return loss

    def kill_frozen(self) -> None:
        for pid in self.frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.frozen.clear()


class Loss:
    thread: threading.Thread
    frozen: Optional[Frozen] = None
    error: Optional[BaseException] = None

    def confirm(self) -> Frozen:
        """The frozen task, once its node was lost and the checks passed."""
        self.thread.join(30)
        if self.error is not None:
            raise self.error
        assert self.frozen is not None, "the node was not lost"
        return self.frozen


def _state(pid: int) -> str:
    """A process's state letter (``T``: stopped, ``S``: sleeping), or
    ``gone``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def open_files(pid: int, under: Path) -> List[str]:
    """The files under ``under`` that process ``pid`` has open."""
    out = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith(str(under)):
            out.append(target)
    return out


def locked(path: str) -> bool:
    """Whether another process holds ``path``'s lock (a writer's ``flock``)."""
    with open(path, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def left_as_expected(point: str) -> Callable[[Frozen], None]:
    """Before the node goes: early, the task has nothing open in the test
    directory; mid, its attempt's partial file, locked; late, its
    attempt's file, complete."""
    root = Path("/tmp")

    def check(frozen: Frozen) -> None:
        here = Path(frozen.file).parent if frozen.file else root
        if point == "early":
            assert frozen.file == "" and not any(f.endswith((".partial", ".mrec.lmdb")) for f in open_files(frozen.pid, root))
        elif point == "mid":
            assert frozen.file.endswith(".partial") and frozen.file in open_files(frozen.pid, here) and locked(frozen.file)
        else:
            assert os.path.basename(frozen.file).startswith(".") and len(mrec.open(frozen.file)) > 0

    return check


def still_locked(point: str) -> Callable[[Frozen], None]:
    """After the node went: the dead attempt's partial file (mid) is still
    open in the child that outlived it, and so locked (unless the job,
    done meanwhile, removed it)."""

    def check(frozen: Frozen) -> None:
        if point == "mid":
            held = open_files(frozen.holder, Path(frozen.file).parent)
            assert frozen.file in held or f"{frozen.file} (deleted)" in held, held
            try:
                assert locked(frozen.file)
            except FileNotFoundError:
                pass  # the job, done meanwhile, removed it

    return check


@pytest.fixture(scope="module")
def faults() -> Iterator[Faults]:
    # Ray Data's usage statistics ask a Prometheus server that is not there.
    usage = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    f = Faults()
    ray.init(address=f.cluster.address, log_to_driver=False, configure_logging=False)
    ctx = DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    try:
        yield f
    finally:
        f.kill_frozen()
        ray.shutdown()
        f.cluster.shutdown()
        if usage is None:
            del os.environ["RAY_USAGE_STATS_ENABLED"]
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = usage


@pytest.fixture(autouse=True)
def frozen_killed(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "faults" in request.fixturenames:
        request.getfixturevalue("faults").kill_frozen()


def write_large_aselmdb(path: Path, n: int, natoms: int, seed: int) -> None:
    """An ASE-LMDB shard of ``n`` structures of ``natoms`` atoms."""
    import ase.db
    import numpy as np
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    with ase.db.connect(path, type="aselmdb", append=False) as db:
        for i in range(n):
            a = Atoms(numbers=rng.integers(1, 9, natoms), positions=rng.normal(size=(natoms, 3)) * 5)
            a.calc = SinglePointCalculator(a, energy=float(rng.normal()), forces=rng.normal(size=(natoms, 3)))
            db.write(a, key_value_pairs={"sid": i})


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four ASE-LMDB shards of a few large structures (so that a writer's
    partial file lasts some 15 ms), and their serial import beside them
    (by the importer of ``mrec import aselmdb``)."""
    d = tmp_path_factory.mktemp("sources")
    for k, n in enumerate([8, 5, 10, 6]):
        write_large_aselmdb(d / f"data{k:04d}.aselmdb", n, 1500, seed=k)
    files = sorted(str(p) for p in d.glob("*.aselmdb"))
    _native.import_aselmdb(files, str(serial_of(d)), threads=1)
    return d


def serial_of(sources: Path) -> Path:
    return sources.parent / f"{sources.name}-serial.mrec.lmdb"


def same_collection(got: Any, want: Any) -> None:
    """Record for record, exactly."""
    assert len(got) == len(want)
    for r in range(len(want)):
        same(record_json(got[r]), record_json(want[r]), f"record {r}")


def listing(out: Path) -> List[str]:
    """What a directory holds besides LMDB lock files."""
    return sorted(p.name for p in out.iterdir() if not p.name.endswith("-lock"))


def partial_files(shard: str) -> List[str]:
    """The partial files of writers of ``shard``, whatever their name
    before ``shard``'s (in the same directory)."""
    d, name = os.path.split(shard)
    try:
        return [os.path.join(d, f) for f in os.listdir(d) if f.endswith(name + ".partial")]
    except FileNotFoundError:
        return []


# -- a full disk ---------------------------------------------------------------


def test_a_full_disk_fails_import_ase_and_write_clearly_and_leaves_the_previous_set_whole(tmp_path: Path) -> None:
    """On a 2 MiB tmpfs of a private mount namespace, a driver and its
    local cluster (tests/ray_full_disk.py): a set imported from 2 sources
    (0.5 MiB), then overwritten by the import of 2 large ones (3 MiB); a
    set written from 24 records, then overwritten with 800 (2.5 MiB)."""
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    for k in range(2):
        write_aselmdb(small / f"s{k}.aselmdb", 12, seed=k + 1)
        write_large_aselmdb(big / f"b{k}.aselmdb", 16, 800, seed=k)
    small_file, big_file = tmp_path / "small.mrec.lmdb", tmp_path / "big.mrec.lmdb"
    workers.make_collection(small_file, 24)
    workers.make_collection(big_file, 800)
    disk = tmp_path / "disk"
    disk.mkdir()
    script = Path(__file__).with_name("ray_full_disk.py")
    run = f"'{sys.executable}' '{script}' '{disk}' '{small}' '{big}' '{small_file}' '{big_file}'"
    setup = f"mount -t tmpfs -o size=2m tmpfs '{disk}' || {{ echo 'setup failed' >&2; exit 99; }}; exec {run}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    tried = []
    for flags in (["-m"], ["-r", "-m"]):
        try:
            done = subprocess.run(["unshare", *flags, "--", "sh", "-c", setup], capture_output=True, text=True, env=env, timeout=300)
        except OSError as e:
            tried.append(f"unshare: {e}")
            continue
        if done.returncode == 0:
            break
        if done.returncode == 99 or "unshare:" in done.stderr:
            tried.append(f"unshare {' '.join(flags)}: {done.stderr.strip()[-300:]}")
            continue
        raise AssertionError(f"ray_full_disk.py failed ({done.returncode}):\n{done.stderr[-4000:]}")
    else:
        pytest.skip(f"no private tmpfs could be mounted ({'; '.join(tried)})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for job in ("import", "write"):
        r = result[job]
        assert r["error"] is not None and r["oserror"], (job, r)
        # The file it was writing, on the disk, and the little room left.
        assert f"{disk}/" in r["error"] and "bytes free" in r["error"], (job, r["error"])
        assert r["after"] == r["before"], f"{job}: the previous set is not as it was"
    assert result["again"] == 24 and result["task"] == 42


# -- import_ase ----------------------------------------------------------------


def pausing_import(pause: Pause) -> Callable[..., Any]:
    """``_ray_io.import_one``, frozen at ``pause``: mid is as soon as its
    writer's partial file exists (a thread watches for it)."""
    real = _ray_io.import_one

    def import_one(source: str, shard: str, options: Dict[str, Any]) -> Any:
        pause.attempt(os.path.basename(source))
        pause.here("early")
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.0001):
                for writing in partial_files(shard):
                    pause.here("mid", writing)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            report = real(source, shard, options)
        finally:
            done.set()
            watcher.join()
        pause.here("late", report["file"])
        return report

    return import_one


@pytest.mark.parametrize("point", POINTS)
def test_an_import_that_loses_a_node_completes_and_equals_the_serial_import(
    faults: Faults, sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    pause = faults.pause(tmp_path, point)
    monkeypatch.setattr(_ray_io, "import_one", pausing_import(pause))
    out = tmp_path / "set"
    loss = faults.lose_node_when_frozen(pause, left_as_expected(point), still_locked(point))
    report = mrec.ray.import_ase(sources, out)
    frozen = loss.confirm()
    assert (report.rows, report.records) == (29, 29)
    assert "into data0002.mrec.lmdb: 10 records" in str(report)
    assert listing(out) == ["data0000.mrec.lmdb", "data0001.mrec.lmdb", "data0002.mrec.lmdb", "data0003.mrec.lmdb", "mrec-set.json"]
    assert not os.path.exists(frozen.file), "the dead attempt's file went"
    same_collection(mrec.open(out), mrec.open(serial_of(sources)))
    attempts = Path(pause.attempts).read_text().split()
    assert len(attempts) == 5 and len(set(attempts)) == 4, "one source ran twice: the frozen one"


def test_a_source_that_fails_is_not_retried_and_the_job_ends_cleanly(
    faults: Faults, sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = copy_sources(sources, tmp_path / "bad")
    write_aselmdb(bad / "data0009.aselmdb", 6, seed=9, bad_key=3)
    pause = faults.pause(tmp_path, "none")
    monkeypatch.setattr(_ray_io, "import_one", pausing_import(pause))
    out = tmp_path / "set"
    with pytest.raises(mrec.BadInput, match='data0009.aselmdb: key "3"'):
        mrec.ray.import_ase(bad, out, max_retries=3)
    assert Path(pause.attempts).read_text().split().count("data0009.aselmdb") == 1
    assert listing(out) == []


def test_an_import_with_no_retries_fails_on_a_lost_node_and_leaves_nothing(
    faults: Faults, sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pause = faults.pause(tmp_path, "mid")
    monkeypatch.setattr(_ray_io, "import_one", pausing_import(pause))
    out = tmp_path / "set"
    loss = faults.lose_node_when_frozen(pause)
    with pytest.raises(ray.exceptions.RayError):
        mrec.ray.import_ase(sources, out, max_retries=0)
    loss.confirm()
    assert listing(out) == []


# -- write ---------------------------------------------------------------------


class PausingSink(_ray_io.SetDatasink):
    """The datasink, its write tasks frozen at ``pause`` (mid: after the
    first half of its first block went to the writer, its partial file
    open)."""

    pause: Pause

    def write(self, blocks: Any, ctx: Any) -> Any:
        self.pause.attempt(f"write-{ctx.task_idx}")
        self.pause.here("early")
        shard = os.path.join(self.out_dir, f"{self.prefix}-{self.job}-{ctx.task_idx:05d}.mrec.lmdb")

        def halves() -> Iterator[Any]:
            for block in blocks:
                table = BlockAccessor.for_block(block).to_arrow()
                half = max(1, table.num_rows // 2)
                yield table.slice(0, half)
                for writing in partial_files(shard):
                    self.pause.here("mid", writing)
                yield table.slice(half)

        done = super().write(halves(), ctx)
        self.pause.here("late", done["file"])
        return done


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("whole") / "whole.mrec.lmdb"
    workers.make_collection(path, 24)
    return path


@pytest.mark.parametrize("point", POINTS)
def test_a_write_that_loses_a_node_completes_and_equals_its_dataset(
    faults: Faults, whole: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    pause = faults.pause(tmp_path, point)
    monkeypatch.setattr(PausingSink, "pause", pause, raising=False)
    monkeypatch.setattr(_ray_io, "SetDatasink", PausingSink)
    out = tmp_path / "out"
    loss = faults.lose_node_when_frozen(pause, left_as_expected(point), still_locked(point))
    ds = mrec.ray.read(whole, block_rows=4, override_num_blocks=3)
    mrec.ray.write(ds, out, like=whole)
    frozen = loss.confirm()
    s = mrec.open(out)
    assert s.n_shards == 3 and not [p for p in listing(out) if p.startswith(".")]
    assert not os.path.exists(frozen.file), "the dead attempt's file went"
    same_collection(s, mrec.open(whole))
    attempts = Path(pause.attempts).read_text().split()
    assert len(attempts) == 4 and len(set(attempts)) == 3, attempts


def test_a_write_task_that_fails_is_not_retried(faults: Faults, whole: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pause = faults.pause(tmp_path, "none")
    monkeypatch.setattr(PausingSink, "pause", pause, raising=False)
    monkeypatch.setattr(_ray_io, "SetDatasink", PausingSink)
    out = tmp_path / "out"
    with pytest.raises(Exception, match="injected"):
        mrec.ray.write(mrec.ray.read(whole, override_num_blocks=3), out, like=whole, max_retries=3, _fail_after=2)
    assert Path(pause.attempts).read_text().split().count("write-0") == 1
    assert listing(out) == []


# -- read ----------------------------------------------------------------------


def pausing_read(pause: Pause) -> Callable[..., Iterator[Any]]:
    """``_ray_io._read_records``, frozen at ``pause`` (mid: after its
    first block)."""
    real = _ray_io._read_records

    def _read_records(*args: Any) -> Iterator[Any]:
        pause.attempt(f"read-{args[1]}")
        pause.here("early")
        for i, block in enumerate(real(*args)):
            if i == 1:
                pause.here("mid")
            yield block
        pause.here("late")

    return _read_records


@pytest.mark.parametrize("point", POINTS)
def test_a_read_that_loses_a_node_gives_every_record_once(
    faults: Faults, whole: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    pause = faults.pause(tmp_path, point)
    monkeypatch.setattr(_ray_io, "_read_records", pausing_read(pause))
    loss = faults.lose_node_when_frozen(pause)
    rows = mrec.ray.read(whole, block_rows=4, override_num_blocks=3).take_all()
    loss.confirm()
    c = mrec.open(whole)
    assert [r["record"] for r in rows] == list(range(len(c)))
    for row in rows:
        assert json.loads(row["meta"]) == c[row["record"]]["meta"]
