"""Loader safety: pickling, fork and spawn pools of 4 workers reading
shuffled records (compared with one process), the inherited reader never
used in a child, the Dataset shape, torch's DataLoader."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import random
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import pytest

import mrec
import workers

N_RECORDS = 240


@pytest.fixture(scope="module")
def collection_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("loader") / "synthetic.mrec.lmdb"
    workers.make_collection(path, N_RECORDS)
    return path


def single_process(c: mrec.Collection) -> List[Tuple[Any, ...]]:
    return [workers.digest(c[r]) for r in range(len(c))]


def chunks(order: List[int], n: int) -> List[List[int]]:
    return [order[i : i + n] for i in range(0, len(order), n)]


def test_the_synthetic_collection_is_what_was_written(collection_path: Path) -> None:
    c = mrec.open(collection_path)
    assert len(c) == N_RECORDS
    assert list(c.index["code"][:3]) == ["m0", "m1", "m2"]
    assert c[3]["trajectory"] is None and not c.index["has_trajectory"][3]
    ragged = c[5]["trajectory"]["blocks"]["events"]
    assert "offsets" in ragged and ragged["count"][-1] == 0
    assert ragged["columns"]["energy"].shape == (ragged["offsets"][-1],)
    assert c[5]["trajectory"]["blocks"]["atoms"]["columns"]["x"].ndim == 2  # stacked
    assert c.n_frames == int(c.index["n_frames"].sum())


def test_a_collection_pickles_as_its_path_and_options(collection_path: Path) -> None:
    c = mrec.open(collection_path, checked=True)
    c[0]
    state = c.__getstate__()
    assert state == {"path": str(collection_path), "checked": True}
    data = pickle.dumps(c)
    assert len(data) < 300  # no environment, no records inside
    back = pickle.loads(data)
    assert back.checked and back.path == c.path
    assert workers.digest(back[17]) == workers.digest(c[17])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pools_of_four_read_what_one_process_reads(collection_path: Path, method: str) -> None:
    c = mrec.open(collection_path)
    want = single_process(c)  # the parent has read: its environment is open
    order = list(range(len(c)))
    random.Random(5).shuffle(order)
    ctx = mp.get_context(method)
    if method == "fork":
        workers.INHERITED = c
        try:
            with ctx.Pool(4) as pool:
                results = pool.map(workers.read_inherited, chunks(order, 16))
        finally:
            workers.INHERITED = None
    else:
        with ctx.Pool(4) as pool:
            results = pool.map(workers.read_digests, [(c, ch) for ch in chunks(order, 16)])
    got = [None] * len(c)
    pids = set()
    for part in results:
        for r, d, pid in part:
            got[r] = d
            pids.add(pid)
    assert got == want
    assert os.getpid() not in pids
    assert len(pids) >= 2
    # The parent still reads after its children did.
    assert workers.digest(c[11]) == want[11]


def test_a_forked_child_never_uses_the_inherited_reader(collection_path: Path) -> None:
    c = mrec.open(collection_path)
    want = workers.digest(c[9])
    stale = c._native
    assert stale is not None
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status
        status = 0
        try:
            try:
                stale.record(0)
                status |= 1  # the inherited reader was usable: wrong
            except (RuntimeError, ValueError):
                pass
            if workers.digest(c[9]) != want:  # reopened in this process
                status |= 2
            if c._native is stale or c._native.pid != os.getpid():
                status |= 4
        except BaseException:
            status |= 8
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, os.WEXITSTATUS(status)
    assert workers.digest(c[9]) == want


def test_the_dataset_shape(collection_path: Path) -> None:
    ds = mrec.Dataset(collection_path, transform=workers.code_of)
    assert len(ds) == N_RECORDS
    assert ds[4] == "m4"
    assert ds.__getitems__([2, 0]) == ["m2", "m0"]
    plain = mrec.Dataset(mrec.open(collection_path))
    assert plain[4]["meta"] == {"code": "m4"}
    back = pickle.loads(pickle.dumps(ds))
    assert back[7] == "m7"
    with mp.get_context("spawn").Pool(2) as pool:
        assert pool.map(workers.dataset_item, [(ds, i) for i in (1, 2, 3)]) == ["m1", "m2", "m3"]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_torch_dataloader_with_workers(collection_path: Path, method: str) -> None:
    import torch
    ds = mrec.Dataset(collection_path, transform=workers.code_of)
    ds[0]  # opened in the parent before the workers start
    loader = torch.utils.data.DataLoader(
        ds, batch_size=8, shuffle=True, num_workers=2, multiprocessing_context=method,
        collate_fn=list,
    )
    seen = sorted(code for batch in loader for code in batch)
    assert seen == sorted(f"m{r}" for r in range(N_RECORDS))


def test_batch_runs_beside_threads(collection_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    c = mrec.open(collection_path)
    want = c.batch(list(range(64)))
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: c.batch(list(range(64))), range(8)))
    for out in outs:
        np.testing.assert_array_equal(
            out["trajectory"]["blocks"]["atoms"]["columns"]["x"],
            want["trajectory"]["blocks"]["atoms"]["columns"]["x"],
        )


def test_batch_releases_the_gil(collection_path: Path) -> None:
    """While one thread decodes a long batch, another runs Python code."""
    import threading
    import time

    c = mrec.open(collection_path)
    indices = list(range(len(c))) * 20
    stop = threading.Event()
    ticks: List[float] = []

    def spin() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(0.01)
        t0 = time.perf_counter()
        c._reader().batch(indices)
        t1 = time.perf_counter()
    finally:
        stop.set()
        spinner.join()
    # A margin at each end for the GIL's hand-over.
    inside = [t for t in ticks if t0 + 0.002 < t < t1 - 0.002]
    assert t1 - t0 > 0.01, "the batch was too short to tell"
    assert len(inside) > 100, (len(inside), t1 - t0)
