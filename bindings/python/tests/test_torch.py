"""`mrec.Loader` through torch's own DataLoader: a state saved after any
batch of an epoch (the first, the last, random ones) resumes exactly the
rest of it (the batches before and after are the epoch's, no structure lost
or repeated), with 0 and 2 workers and a different number after the
resume, under fork, forkserver and spawn, with persistent workers, in a new
process as a training script does it; ranks run as many steps and
together read the epoch."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import torch

import mrec

SEED = 11
BUDGET = 60  # atoms a batch: some 25 batches an epoch


@pytest.fixture
def path(small_collection: Path) -> Path:
    return small_collection


def sampler(ds: mrec.Structures, **options: Any) -> mrec.FrameSampler:
    return mrec.FrameSampler(ds, seed=SEED, max_atoms=BUDGET, **options)


def epoch_of(ds: mrec.Structures, epoch: int, **options: Any) -> List[List[int]]:
    """What the epoch's batches are, from the sampler alone."""
    return [b.tolist() for b in sampler(ds, **options).batches(epoch)]


def loader(ds: mrec.Structures, workers_count: int, method: Optional[str] = None, **kwargs: Any) -> Any:
    options = kwargs.pop("options", {})
    context = {"multiprocessing_context": method} if workers_count else {}
    return mrec.Loader(ds, sampler(ds, **options), num_workers=workers_count, **context, **kwargs)


def take(it: Any, k: Optional[int] = None) -> List[List[int]]:
    """The structures of the next `k` batches of `it` (all with None)."""
    out = []
    for batch in it:
        # Made in this process over the arrays a worker sent, not each
        # tensor through a shared-memory file of its own.
        assert isinstance(batch["pos"], torch.Tensor) and not batch["pos"].is_shared()
        out.append(batch["index"].tolist())
        if k is not None and len(out) == k:
            break
    return out


def resumed(ds: mrec.Structures, state: Dict[str, Any], workers_count: int, method: Optional[str]) -> List[List[int]]:
    """A new loader (a new sampler) from `state`: the rest of its epoch."""
    again = loader(ds, workers_count, method)
    again.load_state_dict(json.loads(json.dumps(state)))  # a plain dict: JSON as is
    again.set_epoch(state["epoch"])  # what a training loop does: kept
    return take(again)


def check_epoch(ds: mrec.Structures, got: List[List[int]], want: List[List[int]]) -> None:
    assert got == want
    seen = sorted(i for b in got for i in b)
    assert seen == list(range(len(ds))), "structures lost or repeated"


def stop_points(total: int, randoms: int) -> List[int]:
    rng = random.Random(total)
    return sorted({1, 2, total - 1, total} | set(rng.sample(range(3, total - 1), randoms)))


@pytest.mark.parametrize("before, after", [(0, 2), (2, 0)])
def test_a_state_resumes_exactly_at_every_stop_point(path: Path, before: int, after: int) -> None:
    """The thorough sweep, fork: stop points spread over an epoch, the
    number of workers changed across the resume."""
    ds = mrec.Structures(path, tensors="torch")
    want = epoch_of(ds, 1)
    assert len(want) >= 20
    for k in stop_points(len(want), 6):
        first = loader(ds, before, "fork")
        first.set_epoch(1)
        head = take(first, k)
        state = first.state_dict()
        assert (state["epoch"], state["consumed"]) == (1, k)
        check_epoch(ds, head + resumed(ds, state, after, "fork"), want)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_persistent_workers_resume_under_each_start_method(path: Path, method: str) -> None:
    """One loader's persistent workers (started once: spawn is slow) through
    two epochs, each stopped and resumed from its state; then a new
    loader, without workers, from a state saved mid-epoch."""
    ds = mrec.Structures(path, tensors="torch")
    live = loader(ds, 2, method, persistent_workers=True)
    for epoch, k in ((0, random.Random(3).randrange(1, 10)), (1, len(epoch_of(ds, 1)))):
        want = epoch_of(ds, epoch)
        live.set_epoch(epoch)
        head = take(live, k)
        state = live.state_dict()
        live.load_state_dict(state)
        check_epoch(ds, head + take(live), want)
    live.set_epoch(2)
    want = epoch_of(ds, 2)
    head = take(live, 5)
    check_epoch(ds, head + resumed(ds, live.state_dict(), 0, None), want)


RESUMING_SCRIPT = r"""
import json, sys
import mrec
path, state_file, workers, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ds = mrec.Structures(path, tensors="torch")
loader = mrec.Loader(ds, mrec.FrameSampler(ds, seed=%d, max_atoms=%d), num_workers=workers,
                     **({"multiprocessing_context": "fork"} if workers else {}))
start = 0
try:
    with open(state_file) as f:
        saved = json.load(f)
    loader.load_state_dict(saved["loader"])
    start = saved["epoch"]
except FileNotFoundError:
    pass
seen = []
for epoch in range(start, 2):
    loader.set_epoch(epoch)
    for step, batch in enumerate(loader):
        seen.append((epoch, batch["index"].tolist()))
        if len(seen) == stop:
            with open(state_file, "w") as f:
                json.dump({"epoch": epoch, "loader": loader.state_dict()}, f)
            print(json.dumps(seen))
            sys.exit(0)
print(json.dumps(seen))
""" % (SEED, BUDGET)


def test_a_training_script_stopped_and_started_again_in_a_new_process(path: Path, tmp_path: Path) -> None:
    """A script that iterates two epochs stops mid-epoch 0 with two
    workers, saving its state (JSON); started again, with one worker, it
    goes on from there: what both runs saw is the uninterrupted run's."""
    ds = mrec.Structures(path)
    want = [(e, b) for e in (0, 1) for b in epoch_of(ds, e)]
    state = tmp_path / "state.json"

    def run(workers_count: int, stop: int) -> List[Any]:
        done = subprocess.run(
            [sys.executable, "-c", RESUMING_SCRIPT, str(path), str(state), str(workers_count), str(stop)],
            capture_output=True, text=True, check=True,
        )
        return [(e, b) for e, b in json.loads(done.stdout)]

    stop = len(epoch_of(ds, 0)) // 2 + 1
    head = run(2, stop)
    assert len(head) == stop
    assert head + run(1, -1) == want


def test_ranks_run_as_many_steps_and_read_the_whole_epoch(path: Path) -> None:
    """Three ranks' loaders: as many steps each; the union of their
    structures is the epoch, the padding (the epoch's first batches again)
    the only repeats; a rank's state resumes any rank."""
    ds = mrec.Structures(path, tensors="torch")
    whole = epoch_of(ds, 0)
    w = next(w for w in (3, 4, 5, 6) if len(whole) % w)  # the last round short
    short = -len(whole) % w
    ranks = [loader(ds, 0, options={"rank": r, "world_size": w}) for r in range(w)]
    seen = [take(r) for r in ranks]
    assert {len(s) for s in seen} == {len(whole) // w + 1}
    dealt = [seen[i % w][i // w] for i in range(len(whole) + short)]
    assert dealt == whole + whole[:short]
    assert sorted({i for s in seen for b in s for i in b}) == list(range(len(ds)))
    head = take(ranks[0], 2)
    assert head == seen[0][:2]
    other = loader(ds, 0, options={"rank": w - 1, "world_size": w})
    other.load_state_dict(ranks[0].state_dict())
    assert take(other) == seen[w - 1][2:]
    uneven = [take(loader(ds, 0, options={"rank": r, "world_size": w, "uneven_steps": True})) for r in range(w)]
    assert sorted(i for s in uneven for b in s for i in b) == list(range(len(ds)))


def test_the_state_between_epochs_and_what_is_refused(path: Path) -> None:
    ds = mrec.Structures(path, tensors="torch")
    first = loader(ds, 0)
    assert first.state_dict()["consumed"] == 0
    take(first)
    assert first.state_dict()["consumed"] == len(first)  # the epoch done
    first.set_epoch(1)
    assert (first.state_dict()["epoch"], first.state_dict()["consumed"]) == (1, 0)
    head = take(first, 3)
    again = loader(ds, 0)
    again.load_state_dict(first.state_dict())
    assert again.state_dict() == first.state_dict()  # saved again before iterating
    with pytest.raises(ValueError, match="mid-epoch 1"):
        again.set_epoch(2)
    assert head + take(again) == epoch_of(ds, 1)
    with pytest.raises(ValueError, match="in_order"):
        mrec.Loader(ds, sampler(ds), in_order=False)
    with pytest.raises(TypeError, match="FrameSampler"):
        mrec.Loader(ds, [[0, 1]])
