"""``mrec.FrameSampler``: shuffled epochs of batches of structures, split
across ranks, by count or by an atom budget, resumable mid-epoch.

An epoch's global order is a permutation of every structure drawn from
NumPy's PCG64 seeded with ``(seed, epoch)``, so it depends on nothing else:
not on the number of ranks, of loader workers, or on the process. The
order is cut into batches, every rank cutting the same batches; rank ``r``
of ``w`` takes batches ``r, r + w, r + 2w, ...`` (with ``drop_last``, the
batches that would leave some rank one short are dropped, so every rank
runs the same number of steps). The batches of all ranks together are the
epoch's batches: no structure is in two ranks' batches.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional

import numpy as np


class FrameSampler:
    """Batches of structure indices of ``dataset`` (anything with
    ``__len__``; with ``max_atoms``, also ``natoms``, one count per
    structure, as :class:`mrec.Structures` has), for
    ``torch.utils.data.DataLoader(dataset, batch_sampler=sampler)`` or a
    loop without torch.

    ``batch_size``: structures per batch; ``max_atoms``: atoms per batch
    (the batch closes before the structure that would pass the budget; a
    structure larger than the budget is a batch of its own). Either or
    both (a batch closes at the first limit reached); neither is an error.

    ``set_epoch(e)`` chooses the epoch (0 at first), as with torch's
    ``DistributedSampler``. ``state_dict()`` after ``k`` batches of an
    epoch were drawn, given to ``load_state_dict`` of a new sampler (same
    dataset length and options), makes its next iteration yield exactly the
    rest of that epoch; the iteration after it starts the epoch then set
    (the convention of torchdata's stateful loaders).
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
    ) -> None:
        if batch_size is None and max_atoms is None:
            raise ValueError("FrameSampler needs batch_size, max_atoms, or both")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        if max_atoms is not None and max_atoms < 1:
            raise ValueError(f"max_atoms must be at least 1, not {max_atoms}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size")
        self.n = len(dataset)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.batch_size = batch_size
        self.max_atoms = max_atoms
        self.drop_last = bool(drop_last)
        self.natoms: Optional[np.ndarray] = None
        if max_atoms is not None:
            self.natoms = np.asarray(dataset.natoms, dtype=np.int64)
            if len(self.natoms) != self.n:
                raise ValueError(f"natoms has {len(self.natoms)} counts for {self.n} structures")
        self.epoch = 0
        self._yielded = 0
        self._resume: Optional[int] = None
        self._cached: Optional[tuple] = None

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration draws."""
        self.epoch = int(epoch)

    def order(self, epoch: Optional[int] = None) -> np.ndarray:
        """The epoch's global order of structures (every rank's the same)."""
        e = self.epoch if epoch is None else int(epoch)
        return np.random.default_rng([self.seed, e]).permutation(self.n)

    def global_batches(self, epoch: Optional[int] = None) -> List[np.ndarray]:
        """The epoch's batches, all ranks', before they are dealt out."""
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

    def batches(self, epoch: Optional[int] = None) -> List[np.ndarray]:
        """This rank's batches of the epoch."""
        e = self.epoch if epoch is None else int(epoch)
        if self._cached is not None and self._cached[0] == e:
            return self._cached[1]
        batches = self.global_batches(e)
        if self.drop_last:
            batches = batches[: len(batches) - len(batches) % self.world_size]
        mine = batches[self.rank :: self.world_size]
        self._cached = (e, mine)
        return mine

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[List[int]]:
        # Not a generator itself: where the epoch starts is settled when
        # the iteration begins, not at its first batch.
        batches = self.batches()
        start = self._resume if self._resume is not None else 0
        self._resume = None
        self._yielded = start
        return self._draw(batches[start:])

    def _draw(self, batches: List[np.ndarray]) -> Iterator[List[int]]:
        for batch in batches:
            self._yielded += 1
            yield batch.tolist()

    def state_dict(self) -> Dict[str, Any]:
        """Where the sampler is: the epoch and the batches of it drawn so
        far, with the options that fix the batches."""
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "yielded": self._yielded,
            "n": self.n,
            "rank": self.rank,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "max_atoms": self.max_atoms,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from ``state`` (:meth:`state_dict` of a sampler of the
        same dataset length and options): the next iteration yields the
        rest of its epoch."""
        for key in ("seed", "n", "rank", "world_size", "batch_size", "max_atoms", "drop_last"):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"state of another sampler: {key} {state.get(key)!r}, this one has {getattr(self, key)!r}"
                )
        self.epoch = int(state["epoch"])
        self._resume = int(state["yielded"])
        self._yielded = self._resume

    def __repr__(self) -> str:
        by = f"batch_size={self.batch_size}" if self.max_atoms is None else f"max_atoms={self.max_atoms}"
        return (
            f"mrec.FrameSampler({self.n:,} structures, seed={self.seed}, epoch={self.epoch}, "
            f"rank {self.rank} of {self.world_size}, {by})"
        )
