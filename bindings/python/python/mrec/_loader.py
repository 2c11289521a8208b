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
it starts worker processes costs nothing. Imports torch (``mrec`` itself
does not: ``mrec.Loader`` is looked up when first used).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Mapping, Optional

import torch.utils.data

from ._sampler import FrameSampler


class Loader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader(dataset, batch_sampler=sampler, ...)``
    with the ``state_dict()`` / ``load_state_dict()`` protocol of torchdata's
    ``StatefulDataLoader``, exact for a :class:`FrameSampler`.

    ``collate_fn`` defaults to ``dataset.collate`` (:meth:`mrec.Structures.collate`)
    when the dataset has one. Every other keyword is ``DataLoader``'s
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
        if collate_fn is None:
            collate_fn = getattr(dataset, "collate", None)
        super().__init__(dataset, batch_sampler=batch_sampler, collate_fn=collate_fn, **kwargs)
        self._iteration: Optional[_Counted] = None

    def set_epoch(self, epoch: int) -> None:
        """:meth:`FrameSampler.set_epoch`."""
        self.batch_sampler.set_epoch(epoch)

    def __iter__(self) -> "_Counted":
        sampler: FrameSampler = self.batch_sampler
        epoch, start = sampler.epoch, sampler._start
        self._iteration = _Counted(super().__iter__(), epoch, start)
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

    def __init__(self, inner: Iterator[Any], epoch: int, start: int) -> None:
        self._inner = inner
        self.epoch = epoch
        self.consumed = start

    def __iter__(self) -> "_Counted":
        return self

    def __next__(self) -> Any:
        batch = next(self._inner)
        self.consumed += 1
        return batch

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]
