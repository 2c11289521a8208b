"""An open collection (:class:`Collection`, :func:`open`): records, batches
and frames by ordinal as NumPy arrays, read by the Rust library with the GIL
released; picklable and fork-safe (see the package's documentation). A
collection is one file, or a sharded set of files read as one (several
files, a directory, a glob pattern, a manifest: docs/shards.md)."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union


from . import _native

PathLike = Union[str, "os.PathLike[str]"]
Record = Dict[str, Any]

# The readers a forked child inherits are closed in the child, before any
# code there can open the same file (which would share the parent's LMDB
# environment through the library's per-process registry).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_native._after_fork_in_child)

BINDING_INDEX_COLUMNS = ("first_frame", "n_frames", "n_atoms", "has_trajectory")


#: The default of ``map_budget_mib``: a reader's mapped file pages beyond
#: this (MiB) are given back. They are the page cache's, shared and
#: reclaimable, not the reader's own memory; a budget below the file's hot
#: set costs throughput (each page read again is mapped again), so the
#: default bounds the resident size of a reader of a large collection
#: without touching the speed of a smaller one (docs/python.md).
MAP_BUDGET_MIB = 1024


#: What a sharded set is to another process: its shards ``(path, n_records,
#: n_frames, bytes)`` and the digest of their declaration.
SetParts = Tuple[List[Tuple[str, int, int, int]], str]


class Collection:
    """An open collection: a file, or a sharded set of files read as one.
    See the module's documentation.

    ``path``: a ``.mrec.lmdb`` file; or a set: a directory (its manifest
    ``mrec-set.json``, else its ``*.mrec.lmdb`` files sorted by name), a
    glob pattern, a manifest, or a list of files (read in that order).
    Records and frames are numbered through the shards in order. A set
    pickles as its shards' description (paths, counts, sizes, declaration
    digest), so a worker that unpickles it opens only the shards it reads,
    each checked against that description when it opens.

    ``map_budget_mib``: how much of the file's pages (MiB) a reader keeps
    mapped, and so counted in its resident memory, before it gives them
    back (the page cache keeps them; a later read of such a page maps it
    again, a minor page fault). A shuffled loader touches pages all over the
    file: with a budget its resident memory stays bounded whatever the
    collection's size. ``None``: never given back.

    ``verify=True``: before anything is read, every shard's bytes are hashed
    and compared with the content digest its manifest keeps (a file alone:
    its own manifest beside it, ``FILE.mrec-set.json``; docs/shards.md);
    :class:`mrec.DigestMismatch` names a shard whose bytes changed,
    :class:`mrec.SetRefused` one without a digest to compare with. Done in
    the process that opens; a pickled copy does not verify again."""

    def __init__(
        self,
        path: Union[PathLike, Sequence[PathLike]],
        checked: bool = False,
        map_budget_mib: Optional[float] = MAP_BUDGET_MIB,
        verify: bool = False,
    ) -> None:
        if isinstance(path, (str, os.PathLike)):
            self._sources = [os.fspath(path)]
        else:
            self._sources = [os.fspath(p) for p in path]
            if not self._sources:
                raise ValueError("mrec.open: no path given")
        self._path = self._sources[0]
        self._checked = bool(checked)
        self._map_budget_mib = map_budget_mib
        self._native: Optional[_native.NativeReader] = None
        self._pid: Optional[int] = None
        #: The set as described once opened (None for one file).
        self._parts: Optional[SetParts] = None
        if verify:
            _native.verify_digests(self._sources)
        self._reader()  # errors now, not in the first read

    # -- per process -------------------------------------------------------

    def _reader(self) -> "_native.NativeReader":
        pid = os.getpid()
        if self._native is None or self._pid != pid:
            # A reader from another process (this object came through fork)
            # is never used: it was already closed by the fork hook.
            self._native = None
            budget = 0 if self._map_budget_mib is None else max(1, int(self._map_budget_mib * 2**20))
            if self._parts is not None:
                shards, digest = self._parts
                self._native = _native.NativeReader.from_parts(shards, digest, self._checked, budget)
            else:
                self._native = _native.NativeReader(self._sources, self._checked, budget)
                if self._is_set(self._native):
                    shards, digest = self._native.parts()
                    self._parts = ([(os.fspath(p), r, f, b) for p, r, f, b in shards], digest)
            self._pid = pid
        return self._native

    def _is_set(self, native: "_native.NativeReader") -> bool:
        """Whether the sources name a set rather than one file."""
        return (
            len(self._sources) > 1
            or native.n_shards > 1
            or native.manifest_path is not None
            or not os.path.isfile(self._sources[0])
        )

    def __getstate__(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {"path": self._path, "checked": self._checked}
        if self._parts is not None:
            state["sources"] = self._sources
            state["parts"] = self._parts
        if self._map_budget_mib != MAP_BUDGET_MIB:
            state["map_budget_mib"] = self._map_budget_mib
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self._path = state["path"]
        self._sources = list(state.get("sources", [self._path]))
        self._parts = state.get("parts")
        self._checked = state["checked"]
        self._map_budget_mib = state.get("map_budget_mib", MAP_BUDGET_MIB)
        self._native = None
        self._pid = None

    def close(self) -> None:
        """Closes the file in this process (a later read reopens it)."""
        if self._native is not None and self._pid == os.getpid():
            self._native.close()
        self._native = None

    def __enter__(self) -> "Collection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what the collection is --------------------------------------------

    @property
    def path(self) -> str:
        """The path given (for a list of files, the first)."""
        return self._path

    @property
    def sources(self) -> List[str]:
        """The paths given, as given."""
        return list(self._sources)

    @property
    def is_set(self) -> bool:
        """Whether this is a sharded set (not one file)."""
        return self._parts is not None

    @property
    def shard_paths(self) -> List[str]:
        """Every shard's file, in order (the file itself for one file)."""
        if self._parts is not None:
            return [p for p, _, _, _ in self._parts[0]]
        return [os.fspath(p) for p in self._reader().shard_paths]

    @property
    def n_shards(self) -> int:
        """Shards of the set (1 for one file)."""
        return len(self._parts[0]) if self._parts is not None else 1

    def shard_ranges(self) -> List[Tuple[str, int, int, int, int]]:
        """Each shard as ``(path, first record, records, first frame,
        frames)`` in the set's numbering, without opening one."""
        if self._parts is None:
            return [(self._path, 0, len(self), 0, self.n_frames)]
        out, r, f = [], 0, 0
        for path, n_records, n_frames, _ in self._parts[0]:
            out.append((path, r, n_records, f, n_frames))
            r += n_records
            f += n_frames
        return out

    @property
    def declaration_sha256(self) -> Optional[str]:
        """SHA-256 of the declaration a set's shards share (None for one file)."""
        return self._parts[1] if self._parts is not None else None

    def open_shards(self) -> List[int]:
        """The shards this process has opened (a set opens a shard when one
        of its records or frames is first read)."""
        return list(self._reader().open_shards())

    @property
    def checked(self) -> bool:
        return self._checked

    def __len__(self) -> int:
        return len(self._reader())

    @property
    def n_frames(self) -> int:
        """Frames of every record together."""
        return self._reader().n_frames

    @property
    def lock_free(self) -> bool:
        """Whether the file was opened without LMDB's lock file (read-only medium)."""
        return self._reader().lock_free

    @property
    def meta(self) -> Dict[str, Any]:
        """The collection document (of a set: its first shard's; the
        ``units`` are every shard's)."""
        return self._reader().meta()

    @property
    def units(self) -> Dict[str, Any]:
        return self.meta.get("units", {})

    @property
    def schema(self) -> Dict[str, Any]:
        """The trajectory declaration (``sequence_schema``) in canonical JSON."""
        return self._reader().schema()

    @property
    def forcefield(self) -> Optional[Dict[str, Any]]:
        """The force field in canonical JSON (``{"meta", "blocks"}``), or None."""
        return self._reader().forcefield()

    @property
    def index(self) -> Dict[str, Any]:
        """Index columns, one row per record, without decoding a record: the
        binding's four (``first_frame``, ``n_frames``, ``n_atoms``,
        ``has_trajectory``) and the collection's own."""
        reader = self._reader()
        out: Dict[str, Any] = dict(reader.binding_index())
        own, _, _ = reader.index()
        out.update(own)
        return out

    @property
    def index_validity(self) -> Dict[str, Any]:
        """Masks of the own index columns that have an invalid row."""
        return self._reader().index()[1]

    @property
    def index_precision(self) -> Dict[str, float]:
        """Declared precisions of the own index columns."""
        return self._reader().index()[2]

    def own_index(self) -> Dict[str, Any]:
        """The collection's own index columns only (what ``Writer.finish`` takes)."""
        return self._reader().index()[0]

    # -- records -----------------------------------------------------------

    def record(self, r: int) -> Record:
        """Record ``r`` (negative counts from the end)."""
        return self._reader().record(int(r))

    def __getitem__(self, r: int) -> Record:
        return self._reader().record(int(r))

    def __iter__(self) -> Iterator[Record]:
        for r in range(len(self)):
            yield self.record(r)

    def batch(self, indices: Sequence[int]) -> Dict[str, Any]:
        """Records ``indices`` concatenated, decoded in Rust with the GIL
        released, in one read transaction."""
        return self._reader().batch([int(i) for i in indices])

    def frames(
        self, js: Sequence[int], system: bool = False, record_meta: bool = False
    ) -> Dict[str, Any]:
        """Frames by global ordinal (``first_frame[r] + k``; negative ones
        count from the end), in one read transaction with the GIL
        released. Each is resolved without replaying its record: the
        per-step values of that frame and, for each block, the latest
        update at or before it that holds it (and the cell in effect).

        The layout of a batch's trajectory, one entry per frame asked for:
        ``{"frames", "record", "position", "trajectory"}``: ``frames``,
        ``record`` and ``position`` int64 ``(n,)`` (the ordinals, each
        frame's record and its position in it); ``trajectory`` is
        ``{"n_frames", "step", "time", "meta", "meta_types", "blocks",
        "cell"}`` with every block flat: ``present``, ``count``,
        ``offsets`` ``(n + 1,)`` and ``columns`` (rows of all frames one
        after the other), ``validity``. With ``system=True``, also
        ``system`` (the systems of the frames' records, each once, in a
        batch's system layout) and ``system_index`` int64 ``(n,)`` (each
        frame's record's system in it); with ``record_meta=True``, ``meta``
        (each frame's record meta). An ordinal out of range raises
        ``IndexError``."""
        return self._reader().frames([int(j) for j in js], system, record_meta)

    def frame(self, j: int) -> Dict[str, Any]:
        """Frame ``j`` by global ordinal: :meth:`frames` of ``[j]`` with its
        record's system and meta."""
        return self._reader().frames([int(j)], True, True)

    def locate(self, j: int) -> "tuple[int, int]":
        """The record of global frame ordinal ``j`` and the frame's position
        in it (no value read)."""
        r, k = self._reader().locate(int(j))
        return int(r), int(k)

    def __repr__(self) -> str:
        if self._parts is not None:
            return f"mrec.Collection({self._sources!r}, {self.n_shards} shards, checked={self._checked})"
        return f"mrec.Collection({self._path!r}, checked={self._checked})"


def open(  # noqa: A001 (the package's entry point)
    path: Union[PathLike, Sequence[PathLike]],
    checked: bool = False,
    map_budget_mib: Optional[float] = MAP_BUDGET_MIB,
    verify: bool = False,
) -> Collection:
    """Opens a committed collection: a file, or a sharded set read as one
    (a directory, a glob pattern, a manifest, or a list of files; shards
    whose declarations differ are refused with :class:`mrec.SetRefused`
    naming the shard). ``checked=True`` checks each file's LMDB pages
    first (for a file from elsewhere: a download, another implementation's
    writer); a damaged file is then refused (``lmdb.file.pages``) instead
    of crashing the process. ``verify=True`` first checks every shard's
    bytes against the content digest its manifest keeps
    (:class:`mrec.DigestMismatch` names one that changed)."""
    return Collection(path, checked=checked, map_budget_mib=map_budget_mib, verify=verify)
