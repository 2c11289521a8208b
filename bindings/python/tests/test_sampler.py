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
def test_ranks_split_the_epoch_in_as_many_steps_each(by: dict, world_size: int) -> None:
    whole = drawn(mrec.FrameSampler(DATA, seed=1, **by))
    short = -len(whole) % world_size  # batches the last round lacks

    def ranks(**how: Any) -> List[List[List[int]]]:
        return [drawn(mrec.FrameSampler(DATA, seed=1, rank=r, world_size=world_size, **by, **how)) for r in range(world_size)]

    # Uneven steps: batch i of the epoch is rank (i mod w)'s, the same
    # batches dealt out, each structure once.
    parts = ranks(uneven_steps=True)
    assert [parts[i % world_size][i // world_size] for i in range(len(whole))] == whole
    seen = [i for p in parts for b in p for i in b]
    assert len(seen) == len(set(seen)) == len(DATA)
    assert {len(p) for p in parts} <= {len(whole) // world_size, len(whole) // world_size + 1}
    # The default: as many steps on every rank; the last round's missing
    # batches are the epoch's first ones again, nothing else repeated.
    even = ranks()
    assert {len(p) for p in even} == {-(-len(whole) // world_size)}
    dealt = [even[i % world_size][i // world_size] for i in range(len(whole) + short)]
    assert dealt == whole + whole[:short]
    assert sorted(set(i for p in even for b in p for i in b)) == list(range(len(DATA)))
    # drop_last: the incomplete last round dropped, nothing repeated.
    dropped = ranks(drop_last=True)
    assert {len(p) for p in dropped} == {len(whole) // world_size}
    kept = [dropped[i % world_size][i // world_size] for i in range(len(whole) - len(whole) % world_size)]
    assert kept == whole[: len(kept)]


def test_padding_when_there_are_fewer_batches_than_ranks() -> None:
    small = Sized([5, 5, 5])
    parts = [drawn(mrec.FrameSampler(small, seed=0, batch_size=2, rank=r, world_size=4)) for r in range(4)]
    whole = drawn(mrec.FrameSampler(small, seed=0, batch_size=2))
    assert len(whole) == 2 and [len(p) for p in parts] == [1, 1, 1, 1]
    assert [p[0] for p in parts] == [whole[0], whole[1], whole[0], whole[1]]


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
    whole = [b.tolist() for b in s.batches()]
    it = iter(s)
    head = [next(it) for _ in range(k)]
    state = s.state_dict()
    assert state["epoch"] == 3 and state["consumed"] == k
    fresh = mrec.FrameSampler(DATA, seed=9, rank=1, world_size=2, **by)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state  # saved again before iterating: the same
    assert head + drawn(fresh) == whole
    # The iteration after the resumed one is a whole epoch again.
    assert drawn(fresh) == whole
    # Any rank's state of the same world size (ranks run as many steps).
    other = mrec.FrameSampler(DATA, seed=9, rank=0, world_size=2, **by)
    rank0 = [b.tolist() for b in other.batches(3)]
    other.load_state_dict(state)
    assert drawn(other) == rank0[k:]
    with pytest.raises(ValueError, match="seed"):
        mrec.FrameSampler(DATA, seed=10, rank=1, world_size=2, **by).load_state_dict(state)
    with pytest.raises(ValueError, match="world_size"):
        mrec.FrameSampler(DATA, seed=9, rank=1, world_size=3, **by).load_state_dict(state)


def test_a_loaded_state_survives_an_iterator_made_and_dropped() -> None:
    """DataLoader calls iter() on its batch sampler twice when it starts
    worker processes, and draws from the second only."""
    s = mrec.FrameSampler(DATA, seed=5, batch_size=10)
    whole = drawn(s)
    s.load_state_dict(dict(s.state_dict(), consumed=4))
    iter(s)  # made and dropped
    assert drawn(s) == whole[4:]
    assert drawn(s) == whole


def test_set_epoch_keeps_a_pending_state_of_its_epoch_only() -> None:
    s = mrec.FrameSampler(DATA, seed=5, batch_size=10)
    s.set_epoch(2)
    state = dict(s.state_dict(), consumed=3)
    s.set_epoch(0)
    s.load_state_dict(state)
    s.set_epoch(2)  # the state's epoch: kept
    with pytest.raises(ValueError, match="mid-epoch 2"):
        s.set_epoch(3)
    assert drawn(s) == [b.tolist() for b in s.batches(2)[3:]]
    s.set_epoch(3)  # nothing pending any more
    # A finished epoch's state: the next iteration of that epoch is empty,
    # another epoch may be set.
    s.load_state_dict(dict(state, consumed=len(s)))
    assert drawn(s) == [] and len(drawn(s)) == len(s)
    s.load_state_dict(dict(state, consumed=len(s)))
    s.set_epoch(4)
    assert s.state_dict()["consumed"] == 0 and len(drawn(s)) == len(s)
    with pytest.raises(ValueError, match="batches consumed"):
        s.load_state_dict(dict(state, consumed=len(s) + 1))


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="batch_size, max_atoms"):
        mrec.FrameSampler(DATA, seed=0)
    with pytest.raises(ValueError, match="choose one"):
        mrec.FrameSampler(DATA, seed=0, batch_size=4, drop_last=True, uneven_steps=True)
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
