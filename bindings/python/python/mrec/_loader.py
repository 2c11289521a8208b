"""``mrec.Loader``: torch's ``DataLoader`` over a :class:`FrameSampler`,
whose state says what the training loop consumed, so that a run stopped
anywhere and started again in a new process goes on with exactly the rest
of its epoch.

What makes that exact: an epoch's batches are a function of the seed, the
epoch and the ranks only (not of the workers, the prefetch or the
process), so a state is ``(epoch, batches the loop consumed)``, counted
here, in the main process, where the loader hands each batch to the loop;
a resumed iteration asks the sampler for the epoch's batches from there.
The sampler's iteration is a generator that takes its start when its
first batch is drawn, so the iterator ``DataLoader`` makes and drops when
it starts worker processes costs nothing.

Transport: over a :class:`Structures` (with no ``collate_fn`` given), a
worker reads several of the sampler's batches a request and writes their
arrays to shared memory, the main process receiving views
(:mod:`mrec._transport` says how and why); the loop still receives one
batch at a time, in the sampler's order. With ``tensors="torch"``, the
tensors are made in the main process over those arrays
(``torch.from_numpy``, no copy): a tensor a worker returns would cross
through a shared-memory file of its own (made, filled, sent, mapped),
which for a batch's dozen small arrays costs several times more. Imports
torch (``mrec`` itself does not: ``mrec.Loader`` is looked up when first
used).
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable, Deque, Dict, Iterator, Mapping, Optional

import torch.utils.data
from torch.utils.data._utils.pin_memory import pin_memory

from ._sampler import FrameSampler
from ._structures import Structures, _to_torch, collate
from ._transport import Arena, Batches, SlotWriter, batches_per_task, tasks


class Loader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader(dataset, batch_sampler=sampler, ...)``
    with the ``state_dict()`` / ``load_state_dict()`` protocol of torchdata's
    ``StatefulDataLoader``, exact for a :class:`FrameSampler`.

    ``collate_fn`` defaults to ``dataset.collate`` (:meth:`mrec.Structures.collate`)
    when the dataset has one; for ``Structures(tensors="torch")``, NumPy
    batches in the workers made tensors in the main process (then pinned
    there with ``pin_memory=True``). ``batches_per_task``: how many of the
    sampler's batches a worker reads per request over a ``Structures``
    (default: up to 256 structures, 16,384 atoms by the sampler's budget,
    or 8 batches; ``prefetch_factor`` counts requests). Every other
    keyword is ``DataLoader``'s (``num_workers``, ``persistent_workers``, ``prefetch_factor``,
    ``multiprocessing_context``, ``pin_memory``, ...), but
    ``in_order=False``, under which batches reach the loop out of the
    sampler's order.

    ``state_dict()``: the sampler's options, ``epoch`` and ``consumed``, the
    batches of that epoch the loop has received from this loader's latest
    iteration (a batch counts once ``next`` has returned it). Saved
    anywhere in an epoch and given to ``load_state_dict`` of a loader over a
    sampler of the same options (in another process, with any number of
    workers), the next iteration yields exactly that epoch's remaining
    batches; the next after it, a whole epoch. A plain dict of numbers
    (``torch.save``, JSON). ``set_epoch(e)`` is the sampler's.
    """

    def __init__(
        self,
        dataset: Any,
        batch_sampler: FrameSampler,
        collate_fn: Optional[Callable[[Any], Any]] = None,
        batches_per_task: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(batch_sampler, FrameSampler):
            raise TypeError(
                f"mrec.Loader needs a mrec.FrameSampler as its batch_sampler, not {type(batch_sampler).__name__}"
            )
        if kwargs.get("in_order", True) is False:
            raise ValueError(
                "mrec.Loader with in_order=False: batches would reach the loop out of the sampler's "
                "order, and how many were consumed would not say which"
            )
        if batches_per_task is not None and batches_per_task < 1:
            raise ValueError(f"batches_per_task must be at least 1, not {batches_per_task}")
        ours = collate_fn is None and isinstance(dataset, Structures)
        self._tensors_here = ours and dataset.tensors == "torch"
        # Over a Structures, requests of several batches, sent through shared memory.
        self._writer = SlotWriter(functools.partial(collate, tensors="numpy")) if ours else None
        self._per_task = batches_per_task or batches_per_task_of(batch_sampler)
        if self._writer is not None:
            collate_fn = self._writer
        elif collate_fn is None:
            collate_fn = getattr(dataset, "collate", None)
        super().__init__(dataset, batch_sampler=batch_sampler, collate_fn=collate_fn, **kwargs)
        # Only the count: the iterator itself (its workers, their arena)
        # goes when the loop lets go of it, as DataLoader's does.
        self._progress: Optional[_Progress] = None

    @property
    def _index_sampler(self) -> Any:
        # What DataLoader's iterators draw requests from: the sampler's
        # batches, grouped when the workers read several a request.
        if self._writer is None:
            return self.batch_sampler
        return _Requests(self.batch_sampler, self._per_task)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def set_epoch(self, epoch: int) -> None:
        """:meth:`FrameSampler.set_epoch`."""
        self.batch_sampler.set_epoch(epoch)

    def __iter__(self) -> "_Counted":
        sampler: FrameSampler = self.batch_sampler
        epoch, start = sampler.epoch, sampler._start
        arena = None
        if self._writer is not None and self.num_workers > 0 and (self._iterator is None or not self.persistent_workers):
            # A new set of workers: a shared-memory arena of their own.
            # Slots a worker: what the loader may have asked of it ahead,
            # and the two requests the loop and this iterator may hold.
            arena = Arena.make(self.num_workers, min(64, (self.prefetch_factor or 2) * self.num_workers + 3))
            self._writer.arena = arena
        try:
            inner = super().__iter__()
        finally:
            if self._writer is not None:
                self._writer.arena = None
            if arena is not None:  # the workers have their mappings (or failed to start)
                arena.workers_started()
        if arena is not None:
            inner._mrec_arena = arena  # type: ignore[union-attr]  # held as long as its workers
        convert = None
        if self._tensors_here:
            pinned = getattr(inner, "_pin_memory", False)
            device = getattr(inner, "_pin_memory_device", None)
            convert = (lambda b: pin_memory(_to_torch(b), device)) if pinned else _to_torch
        self._progress = _Progress(epoch, start)
        return _Counted(inner, self._progress, len(sampler), convert)

    def state_dict(self) -> Dict[str, Any]:
        """Where the training loop is: see the class's documentation."""
        sampler: FrameSampler = self.batch_sampler
        seen = self._progress
        if seen is not None and seen.epoch == sampler.epoch and not sampler._start:
            return sampler._state(seen.epoch, seen.consumed)
        # No iteration since the epoch was set or a state loaded: the next
        # one starts where the sampler will.
        return sampler._state(sampler.epoch, sampler._start)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from ``state`` (:meth:`state_dict`): the next iteration
        yields the rest of its epoch (:meth:`FrameSampler.load_state_dict`
        says what is refused)."""
        self.batch_sampler.load_state_dict(state)
        self._progress = None


def batches_per_task_of(sampler: FrameSampler) -> int:
    """The default ``batches_per_task`` for ``sampler``'s batches."""
    return batches_per_task(sampler.batch_size, sampler.max_atoms)


class _Requests:
    """A sampler's batches in requests of ``per_task`` (``Task``s); its
    iteration starts where the sampler's does, when first drawn."""

    def __init__(self, sampler: FrameSampler, per_task: int) -> None:
        self.sampler = sampler
        self.per_task = per_task

    def __iter__(self) -> Iterator[Any]:
        yield from tasks(iter(self.sampler), self.per_task)

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.per_task)


class _Progress:
    """How many of an epoch's batches the loop has received."""

    __slots__ = ("epoch", "consumed")

    def __init__(self, epoch: int, consumed: int) -> None:
        self.epoch = epoch
        self.consumed = consumed


class _Counted:
    """A ``DataLoader`` iterator whose batches are counted (in ``progress``)
    as the loop receives them, a request's several batches handed out one
    by one."""

    def __init__(
        self, inner: Iterator[Any], progress: _Progress, total: int, convert: Optional[Callable[[Any], Any]] = None
    ) -> None:
        self._inner = inner
        self._convert = convert
        self._ready: Deque[Any] = collections.deque()
        self._total = total
        self.progress = progress

    def __iter__(self) -> "_Counted":
        return self

    def __next__(self) -> Any:
        if not self._ready:
            got = next(self._inner)
            if isinstance(got, Batches):
                self._ready.extend(got)
            else:
                self._ready.append(got)
        batch = self._ready.popleft()
        if self._convert is not None:
            batch = self._convert(batch)
        self.progress.consumed += 1
        return batch

    def __len__(self) -> int:
        return self._total
