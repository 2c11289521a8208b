"""The exceptions of `mrec`: every one subclasses a built-in exception.

Raised by the Rust side (`mrec._native`) and picklable, so that an error in
a loader worker reaches the parent process whole.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple


class Refused(ValueError):
    """The collection (or a record given to a writer) breaks a rule of the
    format.

    ``clause`` is the id of the clause (a key of ``spec-map.toml``, e.g.
    ``"collection.meta.units-required"``); ``path`` says where inside the
    collection (e.g. ``"records[3].trajectory.frames[2].blocks.atoms"``, empty
    for the file as a whole); ``file`` is the collection file's path and
    ``detail`` what was seen.
    """

    def __init__(
        self,
        message: str = "",
        clause: Optional[str] = None,
        path: str = "",
        file: Optional[str] = None,
        detail: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.clause = clause
        self.path = path
        self.file = file
        self.detail = detail

    def __reduce__(self) -> Tuple[Any, ...]:
        message = self.args[0] if self.args else ""
        return (type(self), (message, self.clause, self.path, self.file, self.detail))


class Uncommitted(Refused):
    """The file is not a committed collection (no ``meta`` key: its writer
    failed or was killed before it finished). Clause ``lmdb.meta.required``."""


class Busy(Refused):
    """Another writer holds the path (clause ``lmdb.file.one-writer``)."""


class SetRefused(ValueError):
    """Files that do not form one sharded set (docs/shards.md; this
    project's extension, not a clause of the format). ``problem`` says how:
    ``declaration`` (a shard's units, schema or force field differ from the
    first shard's), ``missing`` (a shard the manifest names is not there),
    ``changed`` (a shard is not what the manifest or the set's description
    says), ``manifest`` (the manifest is not one), ``incomplete`` (a write of
    the set did not finish), ``empty``, ``duplicate``, ``index`` (own index
    columns that do not line up), ``digest`` (a shard's bytes changed:
    :class:`DigestMismatch`), ``no-digest`` (nothing to verify a shard
    against: its manifest predates digests, or no manifest lists it). ``shard`` names the file at fault (empty
    for the set as a whole); ``detail`` says what differs."""

    def __init__(self, message: str = "", problem: str = "", shard: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.problem = problem
        self.shard = shard
        self.detail = detail

    def __reduce__(self) -> Tuple[Any, ...]:
        message = self.args[0] if self.args else ""
        return (type(self), (message, self.problem, self.shard, self.detail))


class DigestMismatch(SetRefused):
    """A shard's bytes are not those its manifest's content digest was
    computed from: the file changed on disk or in a copy since the manifest
    was written (``mrec.open(..., verify=True)``, ``mrec set verify``).
    ``shard`` names it; ``expected`` is the digest the manifest keeps
    (XXH3-128, 32 lowercase hex digits), ``actual`` the file's now.
    ``problem`` is ``"digest"``."""

    def __init__(
        self, message: str = "", problem: str = "digest", shard: str = "", detail: str = "", expected: str = "", actual: str = ""
    ) -> None:
        super().__init__(message, problem, shard, detail)
        self.expected = expected
        self.actual = actual

    def __reduce__(self) -> Tuple[Any, ...]:
        message = self.args[0] if self.args else ""
        return (type(self), (message, self.problem, self.shard, self.detail, self.expected, self.actual))


class BadInput(ValueError):
    """An import's input is not what ASE writes (a row without ``numbers``,
    an array of the wrong shape, an object that is not an ``ase.Atoms``), or
    a record it makes is refused by the collection rules. The message names
    the source, the key (the structure's position in its source, from 1)
    and what is wrong. ``skip_bad=True`` counts these instead."""


class Missing(LookupError):
    """A structure lacks what :class:`mrec.Structures` needs of it (a frame
    without positions, a collection without an ``atoms`` block). ``what``
    names the missing thing; ``frame`` (the global ordinal), ``record`` and
    ``position`` say where, when it is one frame's."""

    def __init__(
        self,
        message: str = "",
        what: str = "",
        frame: Optional[int] = None,
        record: Optional[int] = None,
        position: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.what = what
        self.frame = frame
        self.record = record
        self.position = position

    def __reduce__(self) -> Tuple[Any, ...]:
        message = self.args[0] if self.args else ""
        return (type(self), (message, self.what, self.frame, self.record, self.position))


class NatomsComputed(UserWarning):
    """The atom counts of some structures were not in the collection's index
    (trajectories whose ``atoms`` block is not in their record's system:
    their atom count may change from frame to frame), so each such record's
    headers were read to count them, once per dataset."""


class LmdbError(RuntimeError):
    """An LMDB error that is not a property of the data (map full, reader
    table full, ...)."""


class InternalError(RuntimeError):
    """A bug: the Rust side panicked. The panic was caught at the boundary."""


__all__ = [
    "Refused",
    "Uncommitted",
    "Busy",
    "SetRefused",
    "DigestMismatch",
    "BadInput",
    "Missing",
    "NatomsComputed",
    "LmdbError",
    "InternalError",
]
