"""Any format ASE reads into a molrec collection: :func:`from_ase` and
``python -m mrec import``.

One mapping for both paths: each ``Atoms`` is encoded as the row ASE
itself would write to a database (``ase.db.row.atoms2dict``, encoded by
``ase.io.jsonio.encode``, as the ``aselmdb`` backend stores it), and the
rows are imported by the Rust importer of ``mrec import aselmdb``
(``mrec._native.NativeAseImport``): the same decoding, mapping, grouping,
refusals and report. The table is ``docs/import.md``; :func:`ase_mapping`
returns its machine-readable form.

What an ``Atoms`` adds to ASE's row (ASE's database keeps these apart from
the ``Atoms``, so ``atoms2dict`` has no place for them):

- ``atoms.info["key_value_pairs"]`` and ``atoms.info["data"]`` (what
  ``row.toatoms(add_additional_information=True)`` puts there) become the
  row's ``key_value_pairs`` and ``data``; ``atoms.info["unique_id"]`` its
  ``unique_id``;
- any other ``info`` entry whose value is a bool, int, float or str (an
  extxyz comment's ``config_type=...``) is a key-value pair; any other value
  goes to ``data`` under its key;
- per-atom arrays beyond ASE's own (an extxyz file's extra columns) go to
  ``data["arrays"]``.

``atoms2dict`` draws a random ``unique_id`` for every call; it is dropped,
so one input always gives the same collection.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from . import _native
from ._errors import BadInput

PathLike = Union[str, "os.PathLike[str]"]

#: Per-atom arrays of an ``Atoms`` that ``atoms2dict`` maps itself.
_ASE_ARRAYS = frozenset(
    ["numbers", "positions", "momenta", "masses", "initial_magmoms", "initial_charges", "tags"]
)


@dataclass
class ImportReport:
    """What an import did: ``str(report)`` is the summary ``mrec import``
    prints (rows, records, frames, and every count of what the mapping
    changed, kept aside or dropped)."""

    text: str
    records: int
    frames: int
    rows: int
    rows_read: int
    mapped: Dict[str, int] = field(default_factory=dict)
    changed: Dict[str, int] = field(default_factory=dict)
    kept: Dict[str, int] = field(default_factory=dict)
    dropped: Dict[str, int] = field(default_factory=dict)
    dropped_samples: List[str] = field(default_factory=list)
    #: Seconds the import took.
    secs: float = 0.0
    #: The written collection's content digest (XXH3-128, what a set's
    #: manifest keeps of a shard); None when nothing was written.
    xxh3_128: Optional[str] = None

    def __str__(self) -> str:
        return self.text


def ase_mapping() -> Dict[str, Any]:
    """The mapping table (``import/src/mapping.json``, the one the Rust
    importer is held to): units, and per ASE key its molrec column or key,
    dtype, shape, place and unit."""
    return json.loads(_native.ASE_MAPPING)


def _is_pair_value(value: Any) -> bool:
    import numpy as np

    return isinstance(value, (bool, int, float, str, np.bool_, np.integer, np.floating))


def row_json(atoms: Any) -> bytes:
    """The JSON text of the row ASE would write for ``atoms`` (see the
    module's doc for what ``info`` and extra arrays add to it)."""
    import numpy as np
    from ase.db.row import atoms2dict
    from ase.io.jsonio import encode

    from ase.calculators.calculator import all_properties
    from ase.calculators.singlepoint import SinglePointCalculator

    calc = atoms.calc
    if type(calc) is SinglePointCalculator:
        # What atoms2dict does, with one check of the calculator's state
        # instead of one per property (three quarters of its time for the
        # results a file gives): a single-point calculator's
        # get_property(prop, atoms, False) is its results[prop] while the
        # state holds. The test of both paths compares this with the rows
        # ase-db-backends writes.
        atoms.calc = None
        try:
            dct = atoms2dict(atoms)
        finally:
            atoms.calc = calc
        dct["calculator"] = calc.name.lower()
        dct["calculator_parameters"] = calc.todict()
        if not calc.check_state(atoms):
            for prop in all_properties:
                value = calc.results.get(prop)
                if value is not None:
                    dct[prop] = value
    else:
        dct = atoms2dict(atoms)
    dct.pop("unique_id", None)
    pairs: Dict[str, Any] = {}
    data: Dict[str, Any] = {}
    for key, value in atoms.info.items():
        if key == "key_value_pairs" and isinstance(value, dict):
            pairs.update(value)
        elif key == "data" and isinstance(value, dict):
            data.update(value)
        elif key == "unique_id" and isinstance(value, str):
            dct["unique_id"] = value
        elif _is_pair_value(value):
            pairs[key] = value.item() if isinstance(value, np.generic) else value
        else:
            data[key] = value
    extra = {k: v for k, v in atoms.arrays.items() if k not in _ASE_ARRAYS}
    if extra:
        data["arrays"] = extra
    if pairs:
        dct["key_value_pairs"] = pairs
    if data:
        dct["data"] = data
    if "cell" in dct:
        dct["cell"] = np.asarray(dct["cell"])
    return encode(dct).encode("utf-8")


class _Progress:
    """A line on stderr, at most once a second: structures encoded, rate."""

    def __init__(self, on: bool, label: str) -> None:
        self.on, self.label = on, label
        self.start = self.last = time.monotonic()

    def tick(self, n: int) -> None:
        now = time.monotonic()
        if self.on and now - self.last >= 1.0:
            self.last = now
            rate = n / max(now - self.start, 1e-9)
            print(f"\rread {self.label}: {n} structures, {rate:.0f}/s", end="", file=sys.stderr)

    def done(self) -> None:
        if self.on and self.last != self.start:
            print(file=sys.stderr)


def _run(
    sources: Iterable[tuple],
    path: PathLike,
    *,
    tool: str,
    group_by: Optional[str],
    order_by: Optional[str],
    index_columns: Sequence[str],
    skip_bad: bool,
    overwrite: bool,
    progress: bool,
) -> ImportReport:
    if order_by is not None and group_by is None:
        raise ValueError("order_by needs group_by")
    native = _native.NativeAseImport(
        os.fspath(path),
        tool,
        group_by=group_by,
        order_by=order_by,
        index_columns=list(index_columns),
        skip_bad=skip_bad,
        overwrite=overwrite,
        progress=progress,
    )
    unencodable: List[str] = []
    try:
        for label, images in sources:
            native.begin(label)
            bar = _Progress(progress, label)
            structures = iter(images)
            for k in itertools.count(1):
                try:
                    atoms = next(structures)
                except StopIteration:
                    break
                except Exception as e:
                    if isinstance(e, OSError) and e.errno is not None:
                        raise  # the disk, not the data (ase's parse errors are OSErrors without errno)
                    # The reader cannot go on after this (a generator
                    # that raised is finished): stop, skip_bad or not.
                    message = f"source {label}: key \"{k}\": ase could not read it: {type(e).__name__}: {e}"
                    raise BadInput(message) from e
                try:
                    text = row_json(atoms)
                except (TypeError, ValueError, AttributeError) as e:
                    message = f"source {label}: key \"{k}\": not an ase.Atoms ASE can encode: {e}"
                    if not skip_bad:
                        raise BadInput(message) from e
                    unencodable.append(message)
                    native.skip()
                    bar.tick(k)
                    continue
                native.add(text)
                bar.tick(k)
            bar.done()
        report = native.finish()
    except BaseException:
        native.abort()
        raise
    if unencodable:
        what = "structures ASE's encoder refused (not imported)"
        report["dropped"][what] = len(unencodable)
        report["dropped_samples"] = (unencodable + report["dropped_samples"])[:10]
        report["text"] += f"dropped (skip_bad): {len(unencodable)} {what}\n"
    return ImportReport(**report)


def from_ase(
    images: Iterable[Any],
    path: PathLike,
    *,
    group_by: Optional[str] = None,
    order_by: Optional[str] = None,
    index_columns: Sequence[str] = (),
    skip_bad: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    name: str = "atoms",
) -> ImportReport:
    """Writes the ``ase.Atoms`` of ``images`` (any iterable: a list,
    ``ase.io.iread(...)``, a generator) as the collection ``path``.

    By default each ``Atoms`` is a one-frame record. ``group_by=KEY`` makes
    one record per value of ``KEY`` (looked up in the row's key-value pairs,
    then its ``data`` scalars: an ``info`` entry of the ``Atoms``), its
    frames in the order of the integer ``order_by`` key, or else in the order
    they come. ``index_columns`` are keys to add as the collection's own
    index columns. Bad input raises :class:`mrec.BadInput` naming the source
    (``name``), the key (the structure's position, from 1) and what is wrong;
    ``skip_bad=True`` counts and reports it instead. A refusal of the format
    raises :class:`mrec.Refused`.

    Memory stays flat: rows go to a scratch file beside ``path`` (removed
    after). ``path`` is written whole or not at all; Ctrl-C leaves it as it
    was. Returns the :class:`ImportReport`.
    """
    return _run(
        [(name, images)],
        path,
        tool="mrec.from_ase",
        group_by=group_by,
        order_by=order_by,
        index_columns=index_columns,
        skip_bad=skip_bad,
        overwrite=overwrite,
        progress=progress,
    )


def read_images(file: PathLike, format: Optional[str] = None, index: str = ":") -> Iterable[Any]:
    """The structures of ``file`` as ``python -m mrec import`` reads them:
    ``ase.io.iread``, except for ASE databases (``.db``, ``.json``
    databases, ``aselmdb``), whose rows are read with their key-value
    pairs and data (``row.toatoms(add_additional_information=True)``),
    which ``ase.io`` drops."""
    import ase.db
    import ase.io
    from ase.io.formats import filetype

    fmt = format or filetype(os.fspath(file), read=True)
    if fmt in ("db", "json", "aselmdb") and index == ":":
        try:
            db = ase.db.connect(os.fspath(file), type=fmt, serial=True)
        except (ValueError, KeyError):
            db = None
        if db is not None:
            return (row.toatoms(add_additional_information=True) for row in db.select())
    return ase.io.iread(os.fspath(file), index=index, format=format)


def import_files(
    files: Sequence[PathLike],
    path: PathLike,
    *,
    format: Optional[str] = None,
    index: str = ":",
    group_by: Optional[str] = None,
    order_by: Optional[str] = None,
    index_columns: Sequence[str] = (),
    skip_bad: bool = False,
    overwrite: bool = False,
    progress: bool = False,
) -> ImportReport:
    """Imports every structure of ``files`` (any format ASE reads, one
    source per file, read by :func:`read_images`) as the collection
    ``path``; the options are :func:`from_ase`'s."""
    return _run(
        [(os.fspath(f), read_images(f, format, index)) for f in files],
        path,
        tool="python -m mrec import",
        group_by=group_by,
        order_by=order_by,
        index_columns=index_columns,
        skip_bad=skip_bad,
        overwrite=overwrite,
        progress=progress,
    )
