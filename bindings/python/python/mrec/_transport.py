"""How :class:`mrec.Loader`'s workers hand batches to the main process:
several batches a request, their arrays through shared memory.

torch's ``DataLoader`` sends each batch's indices to a worker and each
batch back through a pipe, pickled. For batches of small structures that
machinery, not the read, sets the pace: a few hundred microseconds a
request in the worker and in the main process (``python -m mrec.bench_torch``).
So a request here carries several of the sampler's batches (a
:class:`Task`: by default up to 256 structures, 16,384 atoms by the
sampler's budget, or 8 batches), and a worker writes the request's
numeric arrays into one slot of a shared-memory file (a Linux ``memfd``)
made by the main process for its workers, sending only where they are.
The main process's arrays are views of the slot, not copies: a slot is
written again only after every array of its batches is gone (a weak
reference on their common base says when), and a worker that finds no
free slot, or a request larger than a slot, sends it pickled as torch
would. Without ``memfd`` (not Linux), every request goes pickled.

Invariants: a slot is written by one worker only (its own range), and only
while its state byte is free; the main process frees it, and only once no
array over it is alive. A batch's slot carries the request's sequence
number, checked where the batch is received: a mismatch is a bug, raised,
never a batch of another's values.
"""

from __future__ import annotations

import mmap
import os
import secrets
import weakref
from multiprocessing.reduction import DupFd
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

#: Bytes a slot can hold (address space: pages are only used as written).
SLOT_BYTES = 8 << 20
#: A slot's header: its state byte, then the sequence number of what it holds.
_HEADER = 64
_FREE, _HELD = 0, 1
#: A request's batches by default: up to this many structures, this many
#: atoms by the sampler's budget, and this many batches.
TASK_STRUCTURES, TASK_ATOMS, TASK_BATCHES = 256, 16_384, 8

#: The main process's arenas, by token, for batches arriving from workers.
_ARENAS: "weakref.WeakValueDictionary[int, Arena]" = weakref.WeakValueDictionary()
#: An arena as a worker writes to it: mapping, token, slots a worker, bytes a slot.
Shared = Tuple[mmap.mmap, int, int, int]


class Task(list):
    """One request to a worker: a list of the sampler's batches (each a
    list of structure indices), which :meth:`mrec.Structures.__getitems__`
    reads as a list of batches."""


def batches_per_task(batch_size: Optional[int], max_atoms: Optional[int]) -> int:
    """How many of a sampler's batches one request carries by default: what
    makes ``TASK_STRUCTURES`` structures or ``TASK_ATOMS`` atoms (by its
    limits), at least 1 and at most ``TASK_BATCHES``."""
    per = TASK_BATCHES
    if batch_size:
        per = min(per, TASK_STRUCTURES // batch_size)
    if max_atoms:
        per = min(per, TASK_ATOMS // max_atoms)
    return max(1, per)


def tasks(batches: Iterator[Any], per_task: int) -> Iterator[Task]:
    """``batches`` in requests of ``per_task`` (the last may hold fewer)."""
    task = Task()
    for batch in batches:
        task.append(batch)
        if len(task) == per_task:
            yield task
            task = Task()
    if task:
        yield task


class Arena:
    """A ``memfd`` of ``workers`` ranges of ``slots`` slots each, mapped in
    the main process and, through :class:`SlotWriter`, in its workers."""

    def __init__(self, workers: int, slots: int, slot_bytes: int = SLOT_BYTES) -> None:
        self.token = secrets.randbits(62)
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.size = workers * slots * slot_bytes
        self.fd: Optional[int] = os.memfd_create("mrec-loader", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.map = mmap.mmap(self.fd, self.size)
        self._held: Dict[int, Any] = {}
        _ARENAS[self.token] = self

    @staticmethod
    def make(workers: int, slots: int) -> Optional["Arena"]:
        """An arena, or None where shared memory cannot be had (then every
        batch goes pickled)."""
        if not hasattr(os, "memfd_create"):
            return None
        try:
            return Arena(workers, slots, SLOT_BYTES)
        except OSError:
            return None

    def shared(self) -> "Shared":
        """What a worker needs to write: the mapping, the token, the slots
        of a worker and a slot's bytes."""
        return self.map, self.token, self.slots, self.slot_bytes

    def workers_started(self) -> None:
        """The workers have their own mapping: the descriptor is no longer needed."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:  # an arena no loader started workers over
        self.workers_started()

    def receive(self, worker: int, slot: int, seq: int, layout: List[Any]) -> List[Dict[str, np.ndarray]]:
        """The batches a worker wrote in a slot, as views of it; the slot
        is freed when the last of them is gone."""
        start = (worker * self.slots + slot) * self.slot_bytes
        header = np.frombuffer(self.map, np.uint64, count=2, offset=start)
        if int(header[0]) != _HELD or int(header[1]) != seq:
            raise RuntimeError(
                f"mrec.Loader: worker {worker}'s shared-memory slot {slot} holds request {int(header[1])}, "
                f"not {seq} (a transport bug: please report it)"
            )
        used = max((off + n for batch in layout for _, _, _, off, n in batch), default=_HEADER)
        base = np.frombuffer(self.map, np.uint8, count=used, offset=start)
        key = start
        self._held[key] = weakref.ref(base, lambda _: self._free(key))
        return [{k: base[off : off + n].view(dtype).reshape(shape) for k, dtype, shape, off, n in batch} for batch in layout]

    def _free(self, start: int) -> None:
        self._held.pop(start, None)
        if not self.map.closed:
            self.map[start] = _FREE


class SlotWriter:
    """The collate function a worker runs: ``collate`` on each batch of a
    request, then the batches' numeric arrays written to one free slot of
    the worker's range (or, failing that, returned to be pickled)."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate
        self.arena: Optional[Arena] = None
        self._shared: Optional[Shared] = None
        self._seq = 0

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled when a worker is started by spawn or forkserver: the
        # memfd goes with it as a descriptor the child receives.
        arena = self.arena
        shared = None if arena is None or arena.fd is None else (DupFd(arena.fd), arena.size, *arena.shared()[1:])
        return {"collate": self.collate, "shared": shared}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.collate, self.arena, self._shared, self._seq = state["collate"], None, None, 0
        if state["shared"] is not None:
            dup, size, token, slots, slot_bytes = state["shared"]
            fd = dup.detach()
            try:
                self._shared = (mmap.mmap(fd, size), token, slots, slot_bytes)
            finally:
                os.close(fd)

    def __call__(self, data: Any) -> Any:
        many = isinstance(data, Batches)
        batches = Batches(self.collate(b) for b in data) if many else Batches([self.collate(data)])
        shared = self._shared
        if shared is None and self.arena is not None:  # a forked worker: the parent's mapping
            shared = self.arena.shared()
        import torch.utils.data  # here, not above: `mrec` imports this module and never torch

        info = torch.utils.data.get_worker_info()
        placed = None if shared is None or info is None else _place(shared, info.id, self._seq, batches, many)
        if placed is not None:
            self._seq = placed.args[3]
            return placed
        return batches if many else batches[0]


def _place(shared: "Shared", worker: int, last: int, batches: List[Any], many: bool = True) -> Optional["InSlot"]:
    """``batches`` written to a free slot of ``worker``'s range: what to
    send for them (received as a :class:`Batches`, or with ``many`` false
    as its one batch), or None (no free slot, a batch not a dict, too
    large)."""
    mapped, token, slots, slot_bytes = shared
    first = worker * slots
    rotation = ((last + k) % slots for k in range(slots))
    slot = next((s for s in rotation if mapped[(first + s) * slot_bytes] == _FREE), None)
    if slot is None or not all(isinstance(b, dict) for b in batches):
        return None
    layout: List[Any] = []
    extras: List[Dict[str, Any]] = []
    off = _HEADER
    for batch in batches:
        entries, rest = [], {}
        for key, value in batch.items():
            if isinstance(value, np.ndarray) and value.dtype != object:
                entries.append((key, value.dtype.str, value.shape, off, value.nbytes))
                off += (value.nbytes + 63) & ~63
            else:
                rest[key] = value
        layout.append(entries)
        extras.append(rest)
    if off > slot_bytes:
        return None
    seq = last + 1
    start = (first + slot) * slot_bytes
    header = np.frombuffer(mapped, np.uint64, count=2, offset=start)
    header[0], header[1] = _HELD, seq
    whole = np.frombuffer(mapped, np.uint8, count=off, offset=start)
    for batch, entries in zip(batches, layout):
        for key, dtype, shape, at, n in entries:
            whole[at : at + n].view(dtype).reshape(shape)[...] = batch[key]
    return InSlot(token, worker, slot, seq, layout, extras, many)


class Batches(list):
    """The batches of one request (:class:`Task`), in its order."""


class InSlot:
    """What a worker sends for the batches it wrote to a slot; unpickled in
    the main process as those batches, views of the slot."""

    def __init__(self, token: int, worker: int, slot: int, seq: int, layout: List[Any], extras: List[Any], many: bool) -> None:
        self.args = (token, worker, slot, seq, layout, extras, many)

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return _received, self.args


def _received(token: int, worker: int, slot: int, seq: int, layout: List[Any], extras: List[Any], many: bool) -> Any:
    arena = _ARENAS.get(token)
    if arena is None:
        raise RuntimeError("mrec.Loader: a batch in shared memory arrived after its loader's workers were gone")
    batches = Batches(arena.receive(worker, slot, seq, layout))
    for batch, rest in zip(batches, extras):
        batch.update(rest)
    return batches if many else batches[0]
