"""``mrec.FrameSampler``: shuffled epochs of batches of structures, split
across ranks, by count or by an atom budget, resumable mid-epoch.

An epoch's global order is a permutation of every structure drawn from
NumPy's PCG64 seeded with ``(seed, epoch)``, so it depends on nothing else:
not on the number of ranks, of loader workers, or on the process. The
order is cut into batches, every rank cutting the same batches; rank ``r``
of ``w`` takes batches ``r, r + w, r + 2w, ...``. Every rank runs the same
number of steps: when the batches do not divide evenly, the last round's
missing batches are the epoch's first ones again (padding, as torch's
``DistributedSampler`` pads), or with ``drop_last`` the last round is
dropped; ``uneven_steps=True`` deals them out as they are.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional

import numpy as np

#: What fixes an epoch's batches: a state of another sampler is refused.
_OPTIONS = ("seed", "n", "world_size", "batch_size", "max_atoms", "drop_last", "uneven_steps")


class FrameSampler:
    """Batches of structure indices of ``dataset`` (anything with
    ``__len__``; with ``max_atoms``, also ``natoms``, one count per
    structure, as :class:`mrec.Structures` has), for :class:`mrec.Loader`
    (torch's ``DataLoader`` with a state that resumes exactly), for
    ``torch.utils.data.DataLoader(dataset, batch_sampler=sampler)``, or for
    a loop without torch.

    ``batch_size``: structures per batch; ``max_atoms``: atoms per batch
    (the batch closes before the structure that would pass the budget; a
    structure larger than the budget is a batch of its own). Either or
    both (a batch closes at the first limit reached); neither is an error.

    Ranks (``rank`` of ``world_size``) take every ``world_size``-th batch.
    By default every rank runs the same number of steps (a rank that runs
    out first would hang DDP's collectives): the last round's missing
    batches, at most ``world_size - 1``, are the epoch's first batches
    again, so their structures are read twice in that epoch and every
    structure at least once. ``drop_last=True`` drops the last round
    instead when it is incomplete (its structures are not read that
    epoch). ``uneven_steps=True`` neither pads nor drops: the ranks'
    batches are exactly the epoch's, and ranks may run one step apart.

    ``set_epoch(e)`` chooses the epoch (0 at first), as with torch's
    ``DistributedSampler``. ``state_dict()`` says where the sampler's
    iteration is: the epoch and the batches it has handed out, exact for a
    loop that uses each batch it draws; under a ``DataLoader``, which
    draws ahead of the training loop (prefetch), :meth:`mrec.Loader.state_dict`
    counts what the loop consumed. ``load_state_dict`` makes the next
    iteration yield exactly the rest of that epoch; the one after it starts
    the epoch then set.
    """

    def __init__(
        self,
        dataset: Any,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        batch_size: Optional[int] = None,
        max_atoms: Optional[int] = None,
        drop_last: bool = False,
        uneven_steps: bool = False,
    ) -> None:
        if batch_size is None and max_atoms is None:
            raise ValueError("FrameSampler needs batch_size, max_atoms, or both")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        if max_atoms is not None and max_atoms < 1:
            raise ValueError(f"max_atoms must be at least 1, not {max_atoms}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size")
        if drop_last and uneven_steps:
            raise ValueError("drop_last and uneven_steps: choose one (drop_last makes the steps even)")
        self.n = len(dataset)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.batch_size = batch_size
        self.max_atoms = max_atoms
        self.drop_last = bool(drop_last)
        self.uneven_steps = bool(uneven_steps)
        self.natoms: Optional[np.ndarray] = None
        if max_atoms is not None:
            self.natoms = np.asarray(dataset.natoms, dtype=np.int64)
            if len(self.natoms) != self.n:
                raise ValueError(f"natoms has {len(self.natoms)} counts for {self.n} structures")
        self.epoch = 0
        #: Where the next iteration starts in its epoch (a loaded state's).
        self._start = 0
        #: Batches of the epoch the latest iteration has handed out.
        self._drawn = 0
        self._cached: Optional[tuple] = None

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration draws. Refused while a state loaded
        mid-epoch waits for its iteration (the rest of that epoch would be
        lost), unless it is that state's epoch."""
        epoch = int(epoch)
        if epoch == self.epoch:
            return
        if 0 < self._start < len(self):
            raise ValueError(
                f"a state loaded mid-epoch {self.epoch} ({self._start} of {len(self)} batches consumed) "
                f"waits for the next iteration: set_epoch({epoch}) would skip the rest of it; "
                f"iterate first, or call set_epoch({self.epoch})"
            )
        self.epoch = epoch
        self._start = self._drawn = 0

    def order(self, epoch: Optional[int] = None) -> np.ndarray:
        """The epoch's global order of structures (every rank's the same)."""
        e = self.epoch if epoch is None else int(epoch)
        return np.random.default_rng([self.seed, e]).permutation(self.n)

    def global_batches(self, epoch: Optional[int] = None) -> List[np.ndarray]:
        """The epoch's batches, all ranks', before they are dealt out (and
        before padding or dropping)."""
        order = self.order(epoch)
        if self.max_atoms is None:
            size = int(self.batch_size or 1)
            return [order[i : i + size] for i in range(0, len(order), size)]
        assert self.natoms is not None
        atoms = np.cumsum(self.natoms[order])
        batches = []
        start = 0
        while start < len(order):
            before = atoms[start - 1] if start else 0
            # The first structure that would pass the budget closes it.
            end = int(np.searchsorted(atoms, before + self.max_atoms, side="right"))
            end = max(end, start + 1)
            if self.batch_size is not None:
                end = min(end, start + self.batch_size)
            batches.append(order[start:end])
            start = end
        return batches

    def dealt_batches(self, epoch: Optional[int] = None) -> List[np.ndarray]:
        """The epoch's batches as they are dealt out, rank ``r`` taking
        every ``world_size``-th from ``r``: :meth:`global_batches` padded with
        its first batches (the default), cut to whole rounds
        (``drop_last``), or as they are (``uneven_steps``)."""
        batches = self.global_batches(epoch)
        short = -len(batches) % self.world_size
        if self.uneven_steps or not short or not batches:
            return batches
        if self.drop_last:
            return batches[: len(batches) - (self.world_size - short)]
        return batches + [batches[i % len(batches)] for i in range(short)]

    def batches(self, epoch: Optional[int] = None) -> List[np.ndarray]:
        """This rank's batches of the epoch."""
        e = self.epoch if epoch is None else int(epoch)
        if self._cached is not None and self._cached[0] == e:
            return self._cached[1]
        mine = self.dealt_batches(e)[self.rank :: self.world_size]
        self._cached = (e, mine)
        return mine

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[List[int]]:
        # A generator: nothing happens until the first batch is drawn, so
        # an iterator made and dropped (DataLoader makes two when it starts
        # its workers) leaves a loaded state's start for the next one.
        batches = self.batches()
        start, self._start = self._start, 0
        self._drawn = start
        for batch in batches[start:]:
            self._drawn += 1
            yield batch.tolist()

    def _state(self, epoch: int, consumed: int) -> Dict[str, Any]:
        state = {key: getattr(self, key) for key in _OPTIONS}
        state.update(epoch=int(epoch), consumed=int(consumed), rank=self.rank)
        return state

    def state_dict(self) -> Dict[str, Any]:
        """The epoch and the batches of it the sampler's iteration handed
        out (``consumed``; a loaded state's own until the next iteration
        draws), with the options that fix the batches."""
        return self._state(self.epoch, self._start or self._drawn)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from ``state`` (:meth:`state_dict`, or
        :meth:`mrec.Loader.state_dict`, of a sampler of the same dataset
        length and options; any rank's, of the same world size: every rank
        has run as many steps): the next iteration yields the rest of its
        epoch, nothing when it was finished (unless another epoch is set
        first)."""
        for key in _OPTIONS:
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"state of another sampler: {key} {state.get(key)!r}, this one has {getattr(self, key)!r}"
                )
        epoch, consumed = int(state["epoch"]), int(state["consumed"])
        total = len(self.batches(epoch))
        if consumed < 0 or (consumed > total and not self.uneven_steps):
            raise ValueError(f"state says {consumed} batches consumed of epoch {epoch}, which has {total}")
        self.epoch = epoch
        # With uneven steps, a rank of one batch more may have saved it.
        self._start = self._drawn = min(consumed, total)

    def __repr__(self) -> str:
        by = f"batch_size={self.batch_size}" if self.max_atoms is None else f"max_atoms={self.max_atoms}"
        return (
            f"mrec.FrameSampler({self.n:,} structures, seed={self.seed}, epoch={self.epoch}, "
            f"rank {self.rank} of {self.world_size}, {by})"
        )
