"""`mrec.FrameSampler`: an epoch's order depends only on the seed and the
epoch (not on ranks or loader workers); ranks split it without overlap; an
atom budget bounds every batch; a state taken after k batches resumes
exactly the rest of the epoch."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

import mrec
import workers


class Sized:
    """A dataset as the sampler sees it: a length and atom counts."""

    def __init__(self, natoms: List[int]) -> None:
        self.natoms = np.asarray(natoms, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.natoms)


DATA = Sized(list(np.random.default_rng(3).integers(1, 60, 1003)))


def drawn(sampler: mrec.FrameSampler) -> List[List[int]]:
    return [list(b) for b in sampler]


def test_an_epoch_depends_on_the_seed_and_the_epoch_only() -> None:
    a = mrec.FrameSampler(DATA, seed=7, batch_size=10)
    b = mrec.FrameSampler(DATA, seed=7, batch_size=10)
    assert drawn(a) == drawn(b) and len(a) == 101
    assert sorted(i for batch in drawn(a) for i in batch) == list(range(len(DATA)))
    assert drawn(a) != drawn(mrec.FrameSampler(DATA, seed=8, batch_size=10))
    first = drawn(a)
    a.set_epoch(1)
    assert drawn(a) != first
    a.set_epoch(0)
    assert drawn(a) == first


@pytest.mark.parametrize("by", [{"batch_size": 16}, {"max_atoms": 300}, {"batch_size": 5, "max_atoms": 120}])
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ranks_split_the_epoch_without_overlap(by: dict, world_size: int) -> None:
    whole = drawn(mrec.FrameSampler(DATA, seed=1, **by))
    parts = [drawn(mrec.FrameSampler(DATA, seed=1, rank=r, world_size=world_size, **by)) for r in range(world_size)]
    # Batch i of the epoch is rank (i mod w)'s: the same batches, dealt out.
    assert [b for i in range(len(whole)) for b in [parts[i % world_size][i // world_size]]] == whole
    seen = [i for p in parts for b in p for i in b]
    assert len(seen) == len(set(seen)) == len(DATA)
    even = [drawn(mrec.FrameSampler(DATA, seed=1, rank=r, world_size=world_size, drop_last=True, **by)) for r in range(world_size)]
    assert len({len(p) for p in even}) == 1
    assert len(even[0]) == len(whole) // world_size
    assert not set(i for p in even for b in p for i in b) - set(seen)


def test_an_atom_budget_bounds_every_batch() -> None:
    budget = 250
    s = mrec.FrameSampler(DATA, seed=4, max_atoms=budget)
    batches = drawn(s)
    order = [i for b in batches for i in b]
    assert order == list(s.order())
    for k, b in enumerate(batches):
        atoms = int(DATA.natoms[b].sum())
        assert atoms <= budget or len(b) == 1
        if k + 1 < len(batches):  # it closed because the next would pass it
            assert atoms + int(DATA.natoms[batches[k + 1][0]]) > budget
    big = Sized([10, 500, 10])
    assert sorted(map(len, drawn(mrec.FrameSampler(big, seed=0, max_atoms=100)))) in ([1, 1, 1], [1, 2])


@pytest.mark.parametrize("k", [0, 1, 7, 30])
@pytest.mark.parametrize("by", [{"batch_size": 16}, {"max_atoms": 300}])
def test_a_saved_state_resumes_exactly_the_rest_of_the_epoch(k: int, by: dict) -> None:
    s = mrec.FrameSampler(DATA, seed=9, rank=1, world_size=2, **by)
    s.set_epoch(3)
    whole = drawn(s)
    it = iter(s)
    head = [next(it) for _ in range(k)]
    state = s.state_dict()
    assert state["epoch"] == 3 and state["yielded"] == k
    fresh = mrec.FrameSampler(DATA, seed=9, rank=1, world_size=2, **by)
    fresh.load_state_dict(state)
    assert head + drawn(fresh) == whole
    # The iteration after the resumed one is a whole epoch again.
    assert drawn(fresh) == whole
    with pytest.raises(ValueError, match="seed"):
        mrec.FrameSampler(DATA, seed=10, rank=1, world_size=2, **by).load_state_dict(state)
    with pytest.raises(ValueError, match="world_size"):
        mrec.FrameSampler(DATA, seed=9, rank=1, world_size=3, **by).load_state_dict(state)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="batch_size, max_atoms"):
        mrec.FrameSampler(DATA, seed=0)
    with pytest.raises(ValueError, match="rank 2 of world_size 2"):
        mrec.FrameSampler(DATA, seed=0, batch_size=4, rank=2, world_size=2)


def read(args: Any) -> List[Any]:
    ds, batches = args
    return [(list(b["index"]), b["pos"].tobytes()) for b in map(ds.batch, batches)]


@pytest.mark.parametrize("workers_count", [1, 2, 3])
def test_the_same_batches_whatever_the_number_of_workers(tmp_path: Path, workers_count: int) -> None:
    """The sampler runs in the loader's process; the batches the workers read
    are its batches, in its order, however many there are."""
    path = tmp_path / "s.mrec.lmdb"
    workers.make_collection(path, 40)
    ds = mrec.Structures(path)
    sampler = mrec.FrameSampler(ds, seed=2, max_atoms=200)
    batches = drawn(sampler)
    want = read((ds, batches))
    with mp.get_context("spawn").Pool(workers_count) as pool:
        # Each worker takes every n-th batch, as DataLoader's workers do.
        parts = pool.map(read, [(ds, batches[w::workers_count]) for w in range(workers_count)])
    got = [parts[i % workers_count][i // workers_count] for i in range(len(batches))]
    assert got == want
    assert sorted(i for b, _ in got for i in b) == list(range(len(ds)))
