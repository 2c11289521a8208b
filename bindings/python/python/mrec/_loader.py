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

Tensors: over a ``Structures(tensors="torch")``, the workers collate NumPy
arrays, and the tensors are made in the main process over the arrays it
received (``torch.from_numpy``, no copy). A tensor a worker returns goes
through a shared-memory file of its own (made, filled, sent, mapped), which
for a batch's dozen small arrays costs several times what pickling them
does (``python -m mrec.bench_torch``). Imports torch (``mrec`` itself does
not: ``mrec.Loader`` is looked up when first used).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Iterator, Mapping, Optional

import torch.utils.data
from torch.utils.data._utils.pin_memory import pin_memory

from ._sampler import FrameSampler
from ._structures import Structures, _to_torch, collate


class Loader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader(dataset, batch_sampler=sampler, ...)``
    with the ``state_dict()`` / ``load_state_dict()`` protocol of torchdata's
    ``StatefulDataLoader``, exact for a :class:`FrameSampler`.

    ``collate_fn`` defaults to ``dataset.collate`` (:meth:`mrec.Structures.collate`)
    when the dataset has one; for ``Structures(tensors="torch")``, NumPy
    batches in the workers made tensors in the main process (then pinned
    there with ``pin_memory=True``). Every other keyword is ``DataLoader``'s
    (``num_workers``, ``persistent_workers``, ``prefetch_factor``,
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
        self._tensors_here = collate_fn is None and isinstance(dataset, Structures) and dataset.tensors == "torch"
        if self._tensors_here:
            collate_fn = functools.partial(collate, tensors="numpy")
        elif collate_fn is None:
            collate_fn = getattr(dataset, "collate", None)
        super().__init__(dataset, batch_sampler=batch_sampler, collate_fn=collate_fn, **kwargs)
        self._iteration: Optional[_Counted] = None

    def set_epoch(self, epoch: int) -> None:
        """:meth:`FrameSampler.set_epoch`."""
        self.batch_sampler.set_epoch(epoch)

    def __iter__(self) -> "_Counted":
        sampler: FrameSampler = self.batch_sampler
        epoch, start = sampler.epoch, sampler._start
        inner = super().__iter__()
        convert = None
        if self._tensors_here:
            pinned = getattr(inner, "_pin_memory", False)
            device = getattr(inner, "_pin_memory_device", None)
            convert = (lambda b: pin_memory(_to_torch(b), device)) if pinned else _to_torch
        self._iteration = _Counted(inner, epoch, start, convert)
        return self._iteration

    def state_dict(self) -> Dict[str, Any]:
        """Where the training loop is: see the class's documentation."""
        sampler: FrameSampler = self.batch_sampler
        it = self._iteration
        if it is not None and it.epoch == sampler.epoch and not sampler._start:
            return sampler._state(it.epoch, it.consumed)
        # No iteration since the epoch was set or a state loaded: the next
        # one starts where the sampler will.
        return sampler._state(sampler.epoch, sampler._start)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from ``state`` (:meth:`state_dict`): the next iteration
        yields the rest of its epoch (:meth:`FrameSampler.load_state_dict`
        says what is refused)."""
        self.batch_sampler.load_state_dict(state)
        self._iteration = None


class _Counted:
    """A ``DataLoader`` iterator whose batches are counted as the loop
    receives them."""

    def __init__(
        self, inner: Iterator[Any], epoch: int, start: int, convert: Optional[Callable[[Any], Any]] = None
    ) -> None:
        self._inner = inner
        self._convert = convert
        self.epoch = epoch
        self.consumed = start

    def __iter__(self) -> "_Counted":
        return self

    def __next__(self) -> Any:
        batch = next(self._inner)
        if self._convert is not None:
            batch = self._convert(batch)
        self.consumed += 1
        return batch

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]
