"""Read and write molrec collections (``*.mrec.lmdb``) as NumPy arrays.

A thin layer over the Rust reference library ``molrec``: every record is
read and checked by the library (``RecordTxn::record_arrays``), with the
GIL released, and handed back as NumPy arrays.

Reading::

    c = mrec.open("water.mrec.lmdb")       # checked=True for a file from elsewhere
    len(c), c.n_frames, c.units, c.meta, c.schema, c.index["n_atoms"]
    rec = c[0]                              # a dict, described below
    x = rec["trajectory"]["blocks"]["atoms"]["columns"]["x"]   # (n_frames, n_atoms)
    b = c.batch([3, 1, 4])                  # many records, one read transaction

A record (``c[r]``, ``c.record(r)``) is a plain dict:

- ``"meta"``: the record's meta document (dict).
- ``"system"``: ``None`` or ``{"meta", "meta_types", "blocks", "cell"}``;
  each block ``{"count", "columns", "validity", "precision",
  "structural_shape", "targets", "attributes"}``, ``columns`` a dict of
  arrays of the column's full shape ``(count, ...)``.
- ``"trajectory"``: ``None`` or ``{"n_frames", "step", "time", "meta",
  "meta_types", "blocks", "cell"}``: ``step`` int64 ``(n_frames,)``,
  ``time`` float64 ``(n_frames,)`` or ``None``, ``meta`` one array per
  per-step key, ``(n_frames,)`` or ``(n_frames, width)`` for a vector tag
  (a list for a ``json`` key). Each block is resolved at every frame by
  carry-forward: ``present`` bool ``(n_frames,)`` (false before the block
  first appears), ``count`` int64 ``(n_frames,)`` rows per frame, and its
  ``columns``: stacked ``(n_frames, rows, ...)`` when every frame has the
  block with the same rows; otherwise flat ``(total rows, ...)`` with
  ``offsets`` int64 ``(n_frames + 1,)`` (frame k's rows are
  ``offsets[k]:offsets[k+1]``). ``cell``: ``None`` or per-frame arrays
  ``present (n,)``, ``vectors (n, 3, 3)`` (lattice vectors are the
  columns), ``origin (n, 3)``, ``boundary (n, 3)``, ``defined (n,)``.

Choices: string columns are NumPy arrays of dtype ``object`` holding
``str`` (NumPy's fixed-width ``U`` would drop trailing NUL characters);
c64/c128 are complex64/complex128. Validity masks are kept apart from the
values: ``validity[col]`` is a bool array over the same rows (true =
valid), present only for columns with an invalid row; the values under an
invalid row are what the file holds.

A batch (``c.batch(indices)``) is ``{"records", "meta" (one dict per
record), "system", "trajectory"}``, every block flat with ``offsets``:
the trajectory's frames of all records one after the other (its own
``offsets``, ``len(indices) + 1``, say which frames are each record's;
each block's ``present``, ``count`` and ``offsets`` are per frame); the
system's blocks per record (``present``, ``count``, ``offsets`` over the
records; ``meta`` and ``meta_types`` lists; ``cell`` per record or
``None``; each block's ``headers``, per record what its block says
besides its rows: ``precision``, ``structural_shape``, ``targets``,
``attributes``, or ``None`` where it is absent or says none of these).
A column some records lack is filled with zeros there, marked invalid in
``validity`` and true in the block's ``lacks[col]`` (bool, per frame or
per system; only for a column some lack), which tells it from a column
of invalid rows. A system column with another dtype or row shape than in
the batch's first record that has it (systems are not declared) is
filled so too, and true in ``differs[col]``. The trajectory's ``timed``
(bool, per record) says which records have times (``time`` is NaN for
the others).

Frames by global ordinal (``first_frame[r] + k``): ``c.frames(js)`` reads
each frame from the updates in effect there (its own, each block's latest,
the cell's), not by replaying its record, in a batch's trajectory layout
plus each frame's ``record`` and ``position`` (``system=True`` adds the
records' systems); ``c.frame(j)`` one, with its system and record meta.

Training on structures: :class:`Structures` is every frame of one or more
collections read back by the ASE mapping (``atomic_numbers``, ``pos``,
``cell``, ``pbc``, ``natoms``, ``energy``, ``forces``, ...), batches
gathered in Rust (per-atom arrays concatenated with a ``batch`` vector);
``get_atoms``, ``get_metadata("natoms")`` and ``natoms`` as FairChem's
ASE-LMDB dataset has them. :class:`FrameSampler` shuffles epochs by seed,
splits them across ranks (every rank as many steps), batches by count or
atom budget; ``mrec.Loader`` (torch's ``DataLoader`` over it; imports
torch) has a ``state_dict()`` that resumes exactly what the training loop
had not consumed. docs/python.md says more.

Importing: :func:`from_ase` writes any iterable of ``ase.Atoms`` as a
collection, :func:`import_files` (and ``python -m mrec import FILE... OUT``)
every structure of files ASE reads, by the mapping of ``mrec import
aselmdb`` (docs/import.md); :func:`to_ase` turns a record's frame back into
an ``ase.Atoms``.

Sharded sets: ``mrec.open(dir)`` (or a glob pattern, a manifest, a list of
files) reads many ``.mrec.lmdb`` files that share one declaration as one
collection, records and frames numbered through the shards in order;
:class:`Structures`, :class:`FrameSampler` and :class:`Dataset` take it as
they take a file. A set's manifest keeps each shard's content digest:
``mrec.open(path, verify=True)`` hashes every shard first and raises
:class:`DigestMismatch` for one whose bytes changed (a file alone is
verified against its own manifest, ``mrec set manifest FILE``).
``mrec.ray`` reads and writes sets with Ray Data (``pip install
"mrec[ray]"``). docs/shards.md says more.

Loader safety: a :class:`Collection` pickles as its path and options and
opens its file lazily in each process (keyed by ``os.getpid()``); the
readers a forked child inherits are closed in the child before it opens
anything (``os.register_at_fork``). :class:`Dataset` is the
``torch.utils.data.Dataset`` shape (``__len__``, ``__getitem__``).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import _native
from ._ase_import import ImportReport, ase_mapping, from_ase, import_files
from ._collection import Collection, open
from ._errors import (
    BadInput,
    Busy,
    DigestMismatch,
    InternalError,
    LmdbError,
    Missing,
    NatomsComputed,
    Refused,
    SetRefused,
    Uncommitted,
)
from ._sampler import FrameSampler
from ._structures import StructureBatch, Structures, collate

__all__ = [
    "open",
    "Collection",
    "Dataset",
    "Writer",
    "Structures",
    "StructureBatch",
    "collate",
    "FrameSampler",
    "Loader",
    "to_ase",
    "from_ase",
    "import_files",
    "ase_mapping",
    "ImportReport",
    "Refused",
    "SetRefused",
    "DigestMismatch",
    "BadInput",
    "Missing",
    "NatomsComputed",
    "Uncommitted",
    "Busy",
    "LmdbError",
    "InternalError",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `mrec.Loader` is a torch DataLoader: torch is imported when it is
    # first asked for, not with mrec.
    if name == "Loader":
        from ._loader import Loader

        return Loader
    raise AttributeError(f"module 'mrec' has no attribute {name!r}")

PathLike = Union[str, "os.PathLike[str]"]
Record = Dict[str, Any]

class Dataset:
    """A collection in the shape of ``torch.utils.data.Dataset``: item ``i``
    is ``transform(c[i])`` (the record itself without a transform).
    Picklable and fork-safe, so ``DataLoader(num_workers > 0)`` works under
    both start methods."""

    def __init__(
        self,
        source: Union[PathLike, Collection],
        transform: Optional[Callable[[Record], Any]] = None,
        checked: bool = False,
    ) -> None:
        self.collection = source if isinstance(source, Collection) else Collection(source, checked)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.collection)

    def __getitem__(self, i: int) -> Any:
        record = self.collection.record(i)
        return record if self.transform is None else self.transform(record)

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        return [self[i] for i in indices]


class Writer:
    """Writes a collection, one record at a time (the library's streaming
    writer). Nothing appears at ``path`` until :meth:`finish`; leaving the
    ``with`` block normally finishes, leaving it with an exception deletes
    the partial file.

    ``append`` takes a record in the shape ``Collection.record`` hands back
    (``writer.append(c[r])`` copies a record), any array-like for an array.
    A trajectory block's columns are stacked ``(n_frames, rows, ...)``, or
    flat ``(total rows, ...)`` with ``offsets`` ``(n_frames + 1,)``; a block
    without columns takes its rows from ``count``; ``present`` (default:
    every frame) may be false only before the block first appears.
    ``validity`` holds masks (true = valid), ``precision`` system and index
    precisions; keys the reader adds (``count``, ``n_frames``,
    ``meta_types`` of a trajectory) are ignored. Without ``schema`` the
    declaration is derived from the records (the library's inference);
    per-step tags follow the arrays' dtypes (int32 -> i32, uint64 -> u64,
    ``(n, 3)`` float64 -> f64x3, bool ``(n, 3)`` -> bool3, object str ->
    string, a list -> json). A record whose dtypes need such a tag then
    states its whole declaration, which records presenting different
    subsets of blocks or columns must not: give ``schema`` (``c.schema``
    when copying) for those, and for fills, precisions and
    ``aligned_with``, which only a schema declares. ``forcefield`` is canonical JSON (``{"meta", "blocks"}``, what
    ``Collection.forcefield`` returns). ``digest=True``: :meth:`finish`
    returns the written file's content digest (what a set's manifest keeps
    of a shard; the file is read once more, from the page cache).

    A full disk raises ``OSError`` naming the path and the space left on
    its file system; the path is left as it was, the partial file is
    deleted, and the process writes elsewhere as before.
    """

    def __init__(
        self,
        path: PathLike,
        units: Optional[Mapping[str, Any]],
        schema: Optional[Mapping[str, Any]] = None,
        overwrite: bool = False,
        meta: Optional[Mapping[str, Any]] = None,
        forcefield: Optional[Mapping[str, Any]] = None,
        digest: bool = False,
    ) -> None:
        document = dict(meta or {})
        if units is not None:  # None: the collection has none (refused)
            document["units"] = dict(units)
        self._path = os.fspath(path)
        self._native = _native.NativeWriter(
            self._path, document, schema=schema, forcefield=forcefield, overwrite=overwrite, digest=digest
        )

    @property
    def path(self) -> str:
        return self._path

    @property
    def records(self) -> int:
        """Records appended so far."""
        return self._native.records

    def append(
        self,
        record: Optional[Mapping[str, Any]] = None,
        *,
        meta: Optional[Mapping[str, Any]] = None,
        system: Optional[Mapping[str, Any]] = None,
        trajectory: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Validates and writes one record. A refused record raises
        :class:`Refused` and leaves the writer as it was."""
        if record is not None:
            meta = record.get("meta", meta)
            system = record.get("system", system)
            trajectory = record.get("trajectory", trajectory)
        self._native.append(meta=meta, system=system, trajectory=trajectory)

    def finish(
        self,
        index: Optional[Mapping[str, Any]] = None,
        validity: Optional[Mapping[str, Any]] = None,
        precision: Optional[Mapping[str, float]] = None,
    ) -> Optional[str]:
        """Writes the own index columns (one row per record), commits, and
        installs the collection at its path. Returns the file's content
        digest when the writer was made with ``digest=True``, else None."""
        return self._native.finish(
            dict(index) if index else None,
            dict(validity) if validity else None,
            dict(precision) if precision else None,
        )

    def close(self) -> None:
        """Abandons the write: the partial file is deleted."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and not self._native.closed:
            self.finish()
        else:
            self.close()


def to_ase(record: Mapping[str, Any], frame: int = 0) -> Any:
    """Frame ``frame`` of a record as an ``ase.Atoms`` (needs ``ase``).

    Symbols from the ``atoms`` block's ``element`` (or ``atomic_number``),
    positions from ``x``/``y``/``z``, of the trajectory's ``atoms`` block at
    that frame where it has them, else of the system's. The cell in effect
    (lattice vectors as rows, as ASE wants them) and its periodicity; forces
    (``fx``/``fy``/``fz``), and the per-step ``pe``, ``free_energy`` and
    ``stress`` as a single-point calculator's results (``energy``,
    ``free_energy``, ``stress``) when present and not NaN (NaN is what an
    import fills in for a structure that had none).
    """
    try:
        import ase
        from ase.calculators.singlepoint import SinglePointCalculator
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("mrec.to_ase needs ase (pip install ase)") from e
    import numpy as np

    system = record.get("system") or {}
    traj = record.get("trajectory")
    sys_atoms = (system.get("blocks") or {}).get("atoms")

    def traj_columns() -> Dict[str, Any]:
        if traj is None:
            return {}
        n = traj["n_frames"]
        if not -n <= frame < n:
            raise IndexError(f"frame {frame} out of range: the record has {n}")
        block = traj["blocks"].get("atoms")
        if block is None or not block["present"][frame]:
            return {}
        if "offsets" in block:
            lo, hi = block["offsets"][frame], block["offsets"][frame + 1]
            return {k: v[lo:hi] for k, v in block["columns"].items()}
        return {k: v[frame] for k, v in block["columns"].items()}

    cols: Dict[str, Any] = {}
    if sys_atoms is not None:
        cols.update(sys_atoms["columns"])
    cols.update(traj_columns())
    if "element" in cols:
        symbols: Any = [str(s) for s in cols["element"]]
    elif "atomic_number" in cols:
        symbols = np.asarray(cols["atomic_number"], dtype=int)
    else:
        raise ValueError("the record's atoms block has neither element nor atomic_number")
    n_atoms = len(symbols)
    positions = None
    if all(k in cols for k in ("x", "y", "z")):
        positions = np.stack([cols["x"], cols["y"], cols["z"]], axis=-1).astype(float)
    atoms = ase.Atoms(symbols=symbols, positions=positions)
    cell = None
    if traj is not None and traj.get("cell") is not None and traj["cell"]["present"][frame]:
        c = traj["cell"]
        cell = (c["vectors"][frame], c["boundary"][frame], bool(c["defined"][frame]))
    elif system.get("cell") is not None:
        c = system["cell"]
        cell = (c["vectors"], c["boundary"], bool(c["defined"]))
    if cell is not None and cell[2]:
        atoms.set_cell(np.asarray(cell[0]).T)
        atoms.set_pbc(np.asarray(cell[1], dtype=bool))
    results: Dict[str, Any] = {}
    if all(k in cols for k in ("fx", "fy", "fz")):
        results["forces"] = np.stack([cols["fx"], cols["fy"], cols["fz"]], axis=-1).astype(float)
    step_meta = traj.get("meta", {}) if traj is not None else {}
    for key, name in (("pe", "energy"), ("free_energy", "free_energy"), ("stress", "stress")):
        if key in step_meta:
            value = np.asarray(step_meta[key][frame], dtype=float)
            if not np.isnan(value).any():
                results[name] = value if value.ndim else float(value)
    if results and n_atoms:
        atoms.calc = SinglePointCalculator(atoms, **results)
    return atoms
