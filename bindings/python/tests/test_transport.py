"""`mrec.Loader`'s transport: a worker reads several batches a request and
writes their arrays to shared memory, the main process receiving views.
What must hold: every batch equals a read of its structures in one
process, under each start method; a slot is written again only once no
array over it is alive (batches the loop keeps stay intact, sent pickled
instead); a slot's sequence number is checked where it is received."""

from __future__ import annotations

import mmap
import pickle
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import mrec
from mrec import _transport



@pytest.fixture
def path(small_collection: Path) -> Path:
    return small_collection


def in_shared_memory(a: np.ndarray) -> bool:
    base: Any = a
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def same(got: Dict[str, Any], want: Dict[str, Any]) -> None:
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            np.testing.assert_array_equal(got[key], value, err_msg=key)
        else:
            assert got[key] == value, key


def loader(ds: mrec.Structures, method: str, **kwargs: Any) -> Any:
    sampler = mrec.FrameSampler(ds, seed=5, batch_size=3)
    return mrec.Loader(ds, sampler, num_workers=2, multiprocessing_context=method, **kwargs)


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_every_batch_is_a_view_of_shared_memory_equal_to_a_read(path: Path, method: str) -> None:
    ds = mrec.Structures(path)
    live = loader(ds, method, persistent_workers=True)
    for epoch in (0, 1):  # the second through the same workers and slots
        live.set_epoch(epoch)
        want = [b.tolist() for b in live.batch_sampler.batches(epoch)]
        got = 0
        for batch, indices in zip(live, want, strict=True):
            same(batch, ds.batch(indices))
            assert in_shared_memory(batch["pos"]) and in_shared_memory(batch["natoms"])
            got += 1
        assert got == len(want) > 2 * _transport.batches_per_task(3, None)


def test_batches_the_loop_keeps_are_never_written_over(path: Path) -> None:
    """Two epochs' batches kept: their slots stay held, so the workers send
    the later batches pickled; every batch still equals a read."""
    ds = mrec.Structures(path)
    live = loader(ds, "fork", batches_per_task=1)
    kept: List[Any] = []
    for epoch in (0, 1):
        live.set_epoch(epoch)
        kept.extend(zip(live, [b.tolist() for b in live.batch_sampler.batches(epoch)]))
    for batch, indices in kept:
        same(batch, ds.batch(indices))
    shared = [in_shared_memory(b["pos"]) for b, _ in kept]
    assert any(shared) and not all(shared)


def test_torch_batches_and_requests_of_any_size(path: Path) -> None:
    torch = pytest.importorskip("torch")
    ds = mrec.Structures(path, tensors="torch")
    plain = mrec.Structures(path)
    for per_task in (1, 2, 7, None):
        live = loader(ds, "fork", batches_per_task=per_task)
        want = [b.tolist() for b in live.batch_sampler.batches(0)]
        assert len(live) == len(want)
        for batch, indices in zip(live, want, strict=True):
            assert isinstance(batch["pos"], torch.Tensor)
            same({k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}, plain.batch(indices))
    with pytest.raises(ValueError, match="batches_per_task must be at least 1"):
        loader(ds, "fork", batches_per_task=0)


def test_a_slot_is_freed_with_its_last_array_and_checked_where_received() -> None:
    arena = _transport.Arena(workers=1, slots=2, slot_bytes=4096)
    batches = [{"a": np.arange(5.0), "b": np.ones((2, 3), np.int32), "names": ["x", "y"]}, {"a": np.zeros(0)}]
    sent = _transport._place(arena.shared(), 0, 0, batches)
    assert sent is not None
    got = pickle.loads(pickle.dumps(sent))
    assert isinstance(got, _transport.Batches) and len(got) == 2
    same(got[0], batches[0])
    same(got[1], batches[1])
    slot = sent.args[2] * arena.slot_bytes
    assert arena.map[slot] == 1  # held while an array over it lives
    keep = got[0]["b"]
    del got
    assert arena.map[slot] == 1
    del keep
    assert arena.map[slot] == 0
    # A descriptor whose sequence number is not the slot's is refused.
    again = _transport._place(arena.shared(), 0, 5, batches)
    assert again is not None
    token, worker, slot_index, seq, layout, extras, many = again.args
    stale = _transport.InSlot(token, worker, slot_index, seq + 1, layout, extras, many)
    with pytest.raises(RuntimeError, match="transport bug"):
        pickle.loads(pickle.dumps(stale))
    # No slot free, or a batch larger than a slot: sent pickled (None here).
    assert _transport._place(arena.shared(), 0, 6, batches) is not None
    assert _transport._place(arena.shared(), 0, 7, batches) is None
    assert _transport._place(_transport.Arena(1, 1, 4096).shared(), 0, 0, [{"a": np.zeros(4096)}]) is None


def test_requests_group_the_samplers_batches() -> None:
    assert _transport.batches_per_task(64, None) == 4
    assert _transport.batches_per_task(1, None) == 8
    assert _transport.batches_per_task(None, 60) == 8
    assert _transport.batches_per_task(None, 5000) == 3
    assert _transport.batches_per_task(512, 100_000) == 1
    got = list(_transport.tasks(iter([[1], [2], [3], [4], [5]]), 2))
    assert got == [[[1], [2]], [[3], [4]], [[5]]] and all(isinstance(t, _transport.Task) for t in got)


def arena_descriptors() -> int:
    """The process's open descriptors of loader arenas (``/memfd:mrec-loader``).
    Only those: torch closes its queues' pipes from feeder threads, after
    an epoch ends, so a count of every descriptor races with them."""
    import os

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:mrec-loader")
        except OSError:  # closed since the listing
            pass
    return count


def test_each_new_set_of_workers_leaves_no_descriptor_behind(path: Path) -> None:
    import gc

    ds = mrec.Structures(path)
    live = loader(ds, "fork")  # not persistent: new workers, a new arena, each epoch
    for epoch in (0, 1, 2, 3):
        live.set_epoch(epoch)
        for batch in live:
            assert arena_descriptors() >= 1  # the arena's mapping, while its workers run
        del batch  # the last batch's arrays are views of the arena
        gc.collect()
        assert arena_descriptors() == 0, f"epoch {epoch}"
    # A loop that stops early lets go of its workers too, as DataLoader's
    # does, and the loader still knows where it stopped.
    live.set_epoch(4)
    for i, batch in enumerate(live):
        if i == 2:
            break
    del batch
    gc.collect()
    assert arena_descriptors() == 0
    assert live.state_dict()["epoch"] == 4 and live.state_dict()["consumed"] == 3
