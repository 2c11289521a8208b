"""Structures for training loaders: :class:`Structures`, a map-style
dataset over every frame of one or more collections, each frame read back
by the ASE mapping of ``docs/import.md`` (the importer's, backwards), and
:func:`collate`.

An item is a dict of arrays: per-atom ``atomic_numbers`` (int64),
``pos`` (n, 3), ``forces`` (n, 3), ...; per-structure ``cell`` (3, 3)
(lattice vectors as rows, as ASE holds them; zeros without a cell),
``pbc`` (3,), ``natoms``, ``energy``, ``stress`` (6, Voigt), ``charge``,
``spin``, ...; and ``index``, ``record``, ``frame`` (where it comes from).
A batch (``__getitems__`` then :func:`collate`, or :meth:`Structures.batch`)
holds the per-atom arrays concatenated, a ``batch`` vector (the structure
of each atom) and the per-structure arrays stacked. The batch is gathered
in Rust in one read transaction, with the GIL released.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _ase_build, _native
from ._collection import MAP_BUDGET_MIB, Collection, PathLike
from ._errors import Missing, NatomsComputed
from ._paths import expand
from ._transport import Batches, Task

NAN = math.nan


@dataclass(frozen=True)
class Field:
    """One output of a structure and the molrec data it is read from.

    ``ase`` names the entry of the import mapping (``mapping.json``'s
    ``ase``) it reads back; ``kind`` is ``rows`` (columns of the ``atoms``
    block, side by side), ``step`` (a per-step key) or ``scalar`` (a number
    of the record's meta or of a grouped import's per-step ``ase``
    document); ``fill`` is the value where a structure has none (ASE's own
    default where it has one, else NaN)."""

    key: str
    ase: str
    kind: str
    source: str
    columns: Tuple[str, ...]
    dtype: str
    fill: float
    per_atom: bool
    #: The shape of one atom's value (``pos``: (3,)), or of a structure's
    #: (Voigt ``stress``: (6,)).
    shape: Tuple[int, ...] = ()


def _atoms(
    key: str, ase: str, columns: Tuple[str, ...], dtype: str, fill: float, shape: Tuple[int, ...] = ()
) -> Field:
    if len(columns) > 1:
        shape = (len(columns),)
    return Field(key, ase, "rows", "atoms", columns, dtype, fill, True, shape)


def _step(key: str, ase: str, source: str, shape: Tuple[int, ...] = ()) -> Field:
    return Field(key, ase, "step", source, (), "f64", NAN, False, shape)


#: The import mapping read backwards (docs/import.md, "The mapping").
FIELDS: Tuple[Field, ...] = (
    _atoms("atomic_numbers", "numbers", ("atomic_number",), "i64", 0),
    _atoms("pos", "positions", ("x", "y", "z"), "f64", NAN),
    _atoms("forces", "calc forces", ("fx", "fy", "fz"), "f64", NAN),
    _atoms("charges", "calc charges", ("partial_charge",), "f64", NAN),
    _atoms("magmoms", "calc magmoms", ("magmom",), "f64", NAN),
    _atoms("magmoms_xyz", "calc magmoms (non-collinear)", ("magmom_xyz",), "f64", NAN, (3,)),
    _atoms("energies", "calc energies", ("atom_energy",), "f64", NAN),
    _atoms("initial_charges", "initial_charges", ("charge",), "f64", 0.0),
    _atoms("masses", "masses", ("mass",), "f64", NAN),
    _atoms("tags", "tags", ("tag",), "i64", 0),
    _atoms("initial_magmoms", "initial_magmoms", ("initial_magmom",), "f64", 0.0),
    _atoms(
        "initial_magmoms_xyz", "initial_magmoms (non-collinear)", ("initial_magmom_xyz",), "f64", 0.0, (3,)
    ),
    _atoms("momenta", "momenta", ("px", "py", "pz"), "f64", 0.0),
    _atoms("fixed", "constraints FixAtoms", ("fixed",), "bool", 0),
    _atoms("fixed_cartesian", "constraints FixCartesian", ("fixed_cartesian",), "bool", 0, (3,)),
    _step("energy", "calc energy", "pe"),
    _step("free_energy", "calc free_energy", "free_energy"),
    _step("magmom", "calc magmom", "total_magmom"),
    _step("stress", "calc stress", "stress", (6,)),
    _step("dipole", "calc dipole", "dipole", (3,)),
    # An Atoms' info scalars are key-value pairs of the row (OMol-style
    # charge and spin); absent, 0 (what fairchem assumes).
    Field("charge", "key_value_pairs", "scalar", "charge", (), "i64", 0, False),
    Field("spin", "key_value_pairs", "scalar", "spin", (), "i64", 0, False),
)

_BY_KEY = {f.key: f for f in FIELDS}
#: Outputs every structure has.
ALWAYS = ("atomic_numbers", "pos", "cell", "pbc", "natoms")
#: Where a structure comes from, per structure.
IDS = ("index", "record", "frame")
#: Records whose systems are looked at to choose the outputs.
SAMPLE = 64
#: What an ASE import puts in a system when the structure has it, and ASE
#: assumes when not: a collection an importer of this package wrote
#: (``meta.import``) has these outputs whatever its first records hold.
ASE_SYSTEM_DEFAULTS = ("tags", "fixed", "initial_charges")


def _expand(source: Union[PathLike, Collection, Sequence[Union[PathLike, Collection]]]) -> List[Any]:
    """Paths, directories (their ``*.mrec.lmdb``; a directory with a set's
    manifest is one collection), glob patterns and collections, in order."""
    items = [source] if isinstance(source, (str, os.PathLike, Collection)) else list(source)
    out: List[Any] = []
    for item in items:
        if isinstance(item, Collection):
            out.append(item)
            continue
        path = os.fspath(item)
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "mrec-set.json")):
            out.append(path)  # a sharded set with a manifest: one collection, shards opened as read
        else:
            out.extend(expand(path, "*.mrec.lmdb"))
    if not out:
        raise ValueError("Structures needs at least one collection")
    return out


class Structures:
    """Every frame of one or more collections as a structure (see the
    module's documentation), in the shape of a map-style
    ``torch.utils.data.Dataset`` and of FairChem's ASE-LMDB dataset
    (``get_atoms``, ``get_metadata``, ``natoms``, ``ids``).

    ``source``: a path, a directory (its ``*.mrec.lmdb``), a glob pattern, a
    :class:`Collection`, or a list of them; structure ``i`` counts through
    them in order. ``keys``: the outputs (default: those of the mapping
    the collections have, judged from :data:`SAMPLE` records spread over
    each: their ``atoms`` columns, per-step keys with a value,
    ``charge``/``spin`` in their meta; and :data:`ASE_SYSTEM_DEFAULTS` for
    a collection this package's importers wrote); :data:`ALWAYS` are
    always there.
    ``extra``: outputs by molrec name, for what the mapping does not map:
    ``"atoms.<column>"`` (per atom), ``"<block>.<column>"`` (rows of another
    block, with ``"<block>.<column>.count"`` per structure),
    ``"meta.<key>"`` (a per-step key), ``"record.<key>"`` (a number of the
    record's meta); :meth:`unmapped` lists them. ``tensors``:
    ``"numpy"``, or ``"torch"`` (batches as tensors; needs torch).
    ``checked`` and ``map_budget_mib`` are :class:`Collection`'s.

    Picklable (the collections' paths and the options) and fork-safe, as
    :class:`Collection`.
    """

    def __init__(
        self,
        source: Union[PathLike, Collection, Sequence[Union[PathLike, Collection]]],
        keys: Optional[Sequence[str]] = None,
        extra: Sequence[str] = (),
        tensors: str = "numpy",
        checked: bool = False,
        map_budget_mib: Optional[float] = MAP_BUDGET_MIB,
    ) -> None:
        if tensors not in ("numpy", "torch"):
            raise ValueError(f"tensors must be 'numpy' or 'torch', not {tensors!r}")
        self.collections = [
            c if isinstance(c, Collection) else Collection(c, checked, map_budget_mib)
            for c in _expand(source)
        ]
        self.tensors = tensors
        counts = [c.n_frames for c in self.collections]
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        for c in self.collections:
            self._require_atoms(c)
        self.extra = tuple(extra)
        self.keys = tuple(dict.fromkeys(keys)) if keys is not None else self._default_keys()
        unknown = [k for k in self.keys if k not in _BY_KEY and k not in ("cell", "pbc", "natoms")]
        if unknown:
            raise ValueError(f"unknown keys {unknown}: known are {sorted(_BY_KEY)} and cell, pbc, natoms")
        self.keys = tuple(dict.fromkeys(ALWAYS + self.keys))
        self._plan_entries = [self._plan(c) for c in self.collections]
        self._plans: Optional[List[Any]] = None
        self._natoms: Optional[np.ndarray] = None
        self._kinds = self._row_counts()
        # What get_atoms puts where (ASE's names), of the outputs there are.
        keys = set(self.keys)
        self._atoms_arrays = [
            (k, n)
            for k, n in (
                ("tags", "tags"),
                ("initial_charges", "initial_charges"),
                ("momenta", "momenta"),
                ("masses", "masses"),
                ("initial_magmoms", "initial_magmoms"),
                ("initial_magmoms_xyz", "initial_magmoms"),
            )
            if k in keys
        ]
        self._has_fixed = "fixed" in keys
        self._info_keys = [k for k in ("charge", "spin") if k in keys]
        self._calc_keys = [
            (k, n)
            for k, n in (
                ("energy", "energy"),
                ("free_energy", "free_energy"),
                ("magmom", "magmom"),
                ("stress", "stress"),
                ("dipole", "dipole"),
                ("forces", "forces"),
                ("charges", "charges"),
                ("energies", "energies"),
                ("magmoms", "magmoms"),
                ("magmoms_xyz", "magmoms"),
            )
            if k in keys
        ]
        # Outputs of a batch: the keys, `.count`s of other blocks' rows,
        # `batch`, `index`, `record`, `frame`.
        self._outputs = len(self.keys) + len(self.extra) + 4 + sum(
            1 for v in self._kinds.values() if v.endswith(".count")
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Structures":
        """The dataset a FairChem-style config names: ``src`` (a file, a
        directory of ``*.mrec.lmdb``, a glob pattern, or a list of them,
        where an ASE-LMDB config names ``*.aselmdb``), and optionally
        ``keys``, ``extra``, ``tensors``, ``map_budget_mib``; other entries
        (``a2g_args``, ``format``, ...) are the caller's."""
        if "src" not in config:
            raise KeyError("a dataset config names its files under 'src'")
        options = {k: config[k] for k in ("keys", "extra", "tensors", "map_budget_mib") if k in config}
        return cls(config["src"], **options)

    # -- what the collections hold -----------------------------------------

    @staticmethod
    def _require_atoms(c: Collection) -> None:
        if "atoms" in c.schema.get("blocks", {}) or len(c) == 0:
            return
        systems = c.batch(range(min(SAMPLE, len(c))))["system"]
        if "atoms" not in systems["blocks"]:
            raise Missing(
                f"{c.path}: no `atoms` block (neither declared for the trajectory nor in the "
                f"systems of its first records): a structure's atoms are that block's rows",
                what="block `atoms`",
            )

    def _sample(self, c: Collection) -> Dict[str, Any]:
        """What :data:`SAMPLE` records spread over the collection hold: the
        ``atoms`` columns of their systems and trajectories, the per-step
        keys with a value (not the NaN an import fills in), their metas and
        their frames' per-step ``ase`` documents."""
        out: Dict[str, Any] = {"atoms": set(), "step": set(), "metas": [], "docs": []}
        if len(c) == 0:
            return out
        records = sorted(set(np.linspace(0, len(c) - 1, SAMPLE).astype(int).tolist()))
        # A few records a read: records spread over a large file each map
        # their own folios of its pages, which the reader's map budget gives
        # back between reads, not within one.
        for at in range(0, len(records), 8):
            batch = c.batch(records[at : at + 8])
            for part in (batch["system"], batch["trajectory"]):
                atoms = part["blocks"].get("atoms")
                if atoms is not None:
                    valid = atoms["validity"]
                    out["atoms"].update(k for k in atoms["columns"] if k not in valid or valid[k].any())
            for key, values in batch["trajectory"]["meta"].items():
                if isinstance(values, list):
                    out["docs"].extend(v for v in values if isinstance(v, dict))
                    out["step"].add(key)
                elif values.dtype.kind != "f" or not np.isnan(values).all():
                    out["step"].add(key)
            out["metas"].extend(batch["meta"])
        return out

    def _default_keys(self) -> Tuple[str, ...]:
        have: set = set()
        for c in self.collections:
            if str((c.meta.get("import") or {}).get("tool", "")).startswith(("mrec", "python -m mrec")):
                have.update(ASE_SYSTEM_DEFAULTS)
            sample = self._sample(c)
            for f in FIELDS:
                if f.kind == "rows" and all(col in sample["atoms"] for col in f.columns):
                    have.add(f.key)
                elif f.kind == "step" and f.source in sample["step"]:
                    have.add(f.key)
                elif f.kind == "scalar" and any(
                    f.source in d or f.source in (d.get("key_value_pairs") or {})
                    for d in sample["metas"] + sample["docs"]
                    if isinstance(d, dict)
                ):
                    have.add(f.key)
        ordered = dict.fromkeys(list(ALWAYS) + [f.key for f in FIELDS])
        return tuple(k for k in ordered if k in have or k in ALWAYS)

    def unmapped(self) -> List[str]:
        """What the collections hold beyond the mapped outputs, by the names
        ``extra`` takes."""
        mapped_columns = {col for f in FIELDS if f.kind == "rows" for col in f.columns} | {"element"}
        mapped_keys = {f.source for f in FIELDS if f.kind == "step"}
        names: set = set()
        for c in self.collections:
            schema = c.schema
            blocks: Dict[str, set] = {b: set(d.get("columns", {})) for b, d in schema.get("blocks", {}).items()}
            if len(c):
                for b, d in c.batch(range(min(SAMPLE, len(c))))["system"]["blocks"].items():
                    blocks.setdefault(b, set()).update(d["columns"])
            for b, cols in blocks.items():
                for col in cols:
                    if b != "atoms" or col not in mapped_columns:
                        names.add(f"{b}.{col}")
            names.update(f"meta.{k}" for k in schema.get("meta", {}) if k not in mapped_keys)
        return sorted(names)

    def _plan(self, c: Collection) -> List[Tuple[Any, ...]]:
        """The native plan's entries for collection ``c``: ``(kind, name,
        source, columns, dtype, fill, row shape, required)``."""
        schema = c.schema
        step = schema.get("meta", {})
        entries: List[Tuple[Any, ...]] = []
        for key in self.keys:
            if key in ("cell", "pbc"):
                if not any(e[0] == "cell" for e in entries):
                    entries.append(("cell", "cell", "", [], "native", 0.0, None, False))
                continue
            if key == "natoms":
                continue
            f = _BY_KEY[key]
            if f.kind == "rows":
                required = key in ("atomic_numbers", "pos")
                row = list(f.shape)
                entries.append(("rows", key, f.source, list(f.columns), f.dtype, f.fill, row, required))
            elif f.kind == "step":
                # A key this collection does not declare is NaN for each of
                # its structures (`_filled`).
                if f.source in step:
                    entries.append(("step", key, f.source, [], "f64", NAN, None, False))
            else:
                entries.append(("scalar", key, f.source, [], f.dtype, f.fill, None, False))
        for name in self.extra:
            kind, _, rest = name.partition(".")
            if not rest:
                raise ValueError(f"extra output {name!r}: expected <block>.<column>, meta.<key> or record.<key>")
            if kind == "meta":
                entries.append(("step", name, rest, [], "native", NAN, None, False))
            elif kind == "record":
                entries.append(("scalar", name, rest, [], "f64", NAN, None, False))
            else:
                declared = schema.get("blocks", {}).get(kind, {}).get("columns", {}).get(rest)
                row = None if declared is None else list(declared.get("trailing", []))
                entries.append(("rows", name, kind, [rest], "native", NAN, row, False))
        return entries

    def _filled(self, out: Dict[str, Any]) -> Dict[str, Any]:
        """The per-step outputs a collection does not declare, NaN."""
        if len(out) >= self._outputs:
            return out
        n = len(out["natoms"])
        for key in self.keys:
            if key not in out and key in _BY_KEY:
                f = _BY_KEY[key]
                out[key] = np.full((n,) + f.shape, NAN)
        return out

    def collate(self, items: Union["StructureBatch", Sequence[Mapping[str, Any]]]) -> Dict[str, Any]:
        """:func:`collate` with this dataset's ``tensors``: the
        ``collate_fn`` of a ``DataLoader`` over it."""
        return collate(items, self.tensors)

    def _native_plans(self) -> List[Any]:
        if self._plans is None:
            self._plans = [_native.Plan(e) for e in self._plan_entries]
        return self._plans

    # -- pickling ----------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_plans"] = None  # native, rebuilt where unpickled
        state["_natoms"] = None  # a reading worker keeps no per-frame array
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.__dict__.update(state)

    # -- indices -----------------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _split(self, indices: Sequence[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Global indices (negative from the end) as (index, collection,
        ordinal in it); out of range is an ``IndexError``."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        idx = np.where(idx < 0, idx + n, idx)
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            first = np.asarray(indices).reshape(-1)[np.argmax(bad)]
            raise IndexError(f"structure {int(first)} out of range: the dataset has {n}")
        which = np.searchsorted(self._starts, idx, side="right") - 1
        return idx, which, idx - self._starts[which]

    def id_of(self, i: int) -> Tuple[int, int, int]:
        """Structure ``i`` as ``(collection, record, frame)``: the collection
        among the sources, the record in it and the frame in the record."""
        _, which, j = self._split([i])
        r, k = self.collections[int(which[0])].locate(int(j[0]))
        return int(which[0]), r, k

    def index_of(self, collection: int, record: int, frame: int) -> int:
        """The structure of frame ``frame`` of record ``record`` of
        collection ``collection``: :meth:`id_of` backwards."""
        c = self.collections[collection]
        index = c._reader().binding_index()
        if not 0 <= frame < int(index["n_frames"][record]):
            raise IndexError(f"record {record} has {int(index['n_frames'][record])} frames, not {frame + 1}")
        return int(self._starts[collection] + index["first_frame"][record] + frame)

    @property
    def ids(self) -> "StructureIds":
        """Every structure's ``(collection, record, frame)``, by index."""
        return StructureIds(self)

    # -- reading -----------------------------------------------------------

    def batch(self, indices: Sequence[int]) -> Dict[str, Any]:
        """Structures ``indices`` collated: per-atom arrays concatenated,
        ``batch`` (the structure of each atom), per-structure arrays
        stacked (NumPy, or torch tensors with ``tensors="torch"``)."""
        return collate(self.__getitems__(indices), self.tensors)

    def __getitems__(self, indices: Sequence[int]) -> Union["StructureBatch", Batches]:
        """Structures ``indices`` in one read per collection (what
        ``DataLoader`` calls for a batch; :func:`collate` makes it one).
        :class:`mrec.Loader`'s requests of several batches read as a list of
        them."""
        if isinstance(indices, Task):
            return Batches(self.__getitems__(batch) for batch in indices)
        plans = self._native_plans()
        if len(self.collections) == 1:
            # Structures are the frames: the ordinals go as they are (the
            # reader refuses one out of range, negative ones count back).
            js = indices if isinstance(indices, list) else [int(i) for i in indices]
            try:
                out = self.collections[0]._reader().structures(js, plans[0])
            except IndexError:
                self._split(indices)  # the dataset's own message
                raise
            return StructureBatch(self._filled(out), self._kinds)
        idx, which, js = self._split(indices)
        out = self._gather_many(idx, which, js, plans)
        out["index"] = idx
        out["batch"] = np.repeat(np.arange(len(idx), dtype=np.int64), out["natoms"])
        return StructureBatch(out, self._kinds)

    def _gather_many(self, idx: np.ndarray, which: np.ndarray, js: np.ndarray, plans: List[Any]) -> Dict[str, Any]:
        """Per collection, then back in the order asked."""
        parts = []
        for c in np.unique(which):
            where = np.nonzero(which == c)[0]
            got = self.collections[int(c)]._reader().structures(js[where].tolist(), plans[int(c)])
            parts.append((where, self._filled(got)))
        kinds = self._kinds
        order = np.concatenate([w for w, _ in parts])
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        merged: Dict[str, Any] = {}
        for key in parts[0][1]:
            values = [got[key] for _, got in parts]
            if kinds.get(key) is None:  # per structure
                if isinstance(values[0], list):
                    flat = [v for part in values for v in part]
                    merged[key] = [flat[i] for i in back]
                else:
                    merged[key] = np.concatenate(values)[back]
            else:
                counts = np.concatenate([got[kinds[key]] for _, got in parts])
                merged[key] = _reorder_rows(np.concatenate(values), counts, back)
        return merged

    def _row_counts(self) -> Dict[str, str]:
        """For each per-row output, the per-structure count that splits it."""
        kinds = {f.key: "natoms" for f in FIELDS if f.per_atom}
        for name in self.extra:
            block, _, _ = name.partition(".")
            if block == "atoms":
                kinds[name] = "natoms"
            elif block not in ("meta", "record"):
                kinds[name] = f"{name}.count"
        return kinds

    def __getitem__(self, i: int) -> Dict[str, Any]:
        return self.__getitems__([i])[0]

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def get_atoms(self, i: int) -> Any:
        """Structure ``i`` as an ``ase.Atoms`` (needs ase): numbers,
        positions, cell and pbc; tags, initial charges, masses, momenta and
        initial magnetic moments where the dataset has them; fixed atoms as
        ``FixAtoms``; a single-point calculator with the energy, free
        energy, forces, stress, charges, magnetic moments and dipole it has
        (NaN, the fill of a structure without one, is left out); ``charge``
        and ``spin`` in ``info``."""
        collections = self.collections
        which, j = 0, i
        if len(collections) > 1:
            _, w, js = self._split([i])
            which, j = int(w[0]), int(js[0])
        plans = self._plans or self._native_plans()
        try:
            b = collections[which]._reader().structure(j, plans[which])
        except IndexError:
            self._split([i])  # the dataset's own message
            raise
        atoms = _ase_build.atoms(b["atomic_numbers"], b["pos"], b["cell"], b["pbc"])
        # What this dataset maps beyond the four (empty lists for most).
        for key, name in self._atoms_arrays:
            if key in b:  # absent where the structure has none
                atoms.arrays[name] = b[key]
        if self._has_fixed and "fixed" in b and b["fixed"].any():
            from ase.constraints import FixAtoms

            atoms.set_constraint(FixAtoms(mask=b["fixed"]))
        for key in self._info_keys:
            atoms.info[key] = b[key]
        results: Dict[str, Any] = {}
        for key, name in self._calc_keys:
            if key not in b:
                continue
            value = b[key]
            if type(value) is float:
                if value == value:  # NaN: an import's fill for none
                    results[name] = value
            elif not (value.ndim == 1 and value.dtype.kind == "f" and np.isnan(value).any()):
                results[name] = value
        if results and len(b["atomic_numbers"]):
            _ase_build.attach(atoms, results)
        return atoms

    # -- metadata without decoding -------------------------------------------

    @property
    def natoms(self) -> np.ndarray:
        """Every structure's atom count (int64), without decoding one: from
        the index where it says (records of one frame; trajectories whose
        ``atoms`` block is in the system); else each such record's headers
        are read, once per dataset, with a :class:`mrec.NatomsComputed`
        warning saying how many."""
        if self._natoms is None:
            parts, systems, walked = [], 0, 0
            for c in self.collections:
                counts, s, w = c._reader().frame_atoms()
                parts.append(counts)
                systems += s
                walked += w
            self._natoms = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            if walked:
                warnings.warn(
                    f"natoms: {walked} trajectories keep their atoms out of the system (the count "
                    f"may change from frame to frame), so their headers were read to count them "
                    f"({systems} systems looked at); computed once for this dataset",
                    NatomsComputed,
                    stacklevel=2,
                )
        return self._natoms

    def get_metadata(self, attr: str, indices: Union[int, Sequence[int], None] = None) -> Any:
        """FairChem's ``get_metadata``: ``"natoms"`` of structure(s)
        ``indices`` (all with ``None``), from :attr:`natoms`."""
        if attr != "natoms":
            raise KeyError(f"metadata {attr!r}: Structures has 'natoms'")
        if indices is None:
            return self.natoms
        if isinstance(indices, (int, np.integer)):
            return int(self.natoms[int(indices)])
        idx, _, _ = self._split(indices)
        return self.natoms[idx]

    def metadata_hasattr(self, attr: str) -> bool:
        """Whether :meth:`get_metadata` knows ``attr`` (FairChem's name)."""
        return attr == "natoms"

    def __repr__(self) -> str:
        paths = [c.path for c in self.collections]
        return f"mrec.Structures({paths!r}, {len(self):,} structures, keys={list(self.keys)})"


class StructureIds(Sequence):
    """``Structures.ids``: structure ``i``'s ``(collection, record, frame)``."""

    def __init__(self, ds: Structures) -> None:
        self._ds = ds

    def __len__(self) -> int:
        return len(self._ds)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._ds.id_of(k) for k in range(*i.indices(len(self)))]
        return self._ds.id_of(int(i))


def _reorder_rows(values: Any, counts: np.ndarray, order: np.ndarray) -> Any:
    """Rows of structures (``counts[s]`` each, one after the other) put in
    the structures' order ``order``."""
    starts = np.concatenate([[0], np.cumsum(counts)])
    take = np.concatenate([np.arange(starts[s], starts[s + 1]) for s in order]) if len(order) else np.zeros(0, np.int64)
    return values[take]


class StructureBatch(Sequence):
    """What :meth:`Structures.__getitems__` returns: the structures' arrays
    gathered in one read (``arrays``: per-atom arrays concatenated,
    per-structure ones stacked), and a sequence of the items (each a view
    of them) for a collate function that wants items."""

    def __init__(self, arrays: Dict[str, Any], kinds: Mapping[str, str]) -> None:
        self.arrays = arrays
        self._kinds = {k: v for k, v in kinds.items() if k in arrays}
        self._starts: Dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.arrays["natoms"])

    def _rows(self, count: str) -> np.ndarray:
        if count not in self._starts:
            self._starts[count] = np.concatenate([[0], np.cumsum(self.arrays[count])])
        return self._starts[count]

    def __getitem__(self, s: Any) -> Any:
        if isinstance(s, slice):
            return [self[i] for i in range(*s.indices(len(self)))]
        if not -len(self) <= s < len(self):
            raise IndexError(f"structure {s} out of range: the batch has {len(self)}")
        s = s % len(self)
        item: Dict[str, Any] = {}
        for key, value in self.arrays.items():
            if key == "batch":  # the batch's, not a structure's
                continue
            count = self._kinds.get(key)
            if count is None:
                item[key] = value[s]
            else:
                starts = self._rows(count)
                item[key] = value[starts[s] : starts[s + 1]]
        return item


def collate(items: Union[StructureBatch, Sequence[Mapping[str, Any]]], tensors: str = "numpy") -> Dict[str, Any]:
    """One batch of structures: per-atom arrays concatenated, ``batch``
    (int64, the structure of each atom), per-structure arrays stacked.
    ``items`` is what :meth:`Structures.__getitems__` returns (then nothing
    is copied), or a list of items. ``tensors="torch"`` makes the numeric
    arrays tensors (needs torch)."""
    if isinstance(items, StructureBatch):
        out = dict(items.arrays)
        if tensors == "torch":
            out = _to_torch(out)
        return out
    else:
        items = list(items)
        if not items:
            raise ValueError("collate: no structures")
        out = {}
        for key in items[0]:
            values = [it[key] for it in items]
            first = np.asarray(values[0])
            if key in _PER_ROW_KEYS or (isinstance(values[0], np.ndarray) and key.startswith("atoms.")):
                out[key] = np.concatenate(values)
            elif isinstance(values[0], (list, dict, str)) or first.dtype == object:
                out[key] = list(values)
            else:
                out[key] = np.stack([np.asarray(v) for v in values])
    out["batch"] = np.repeat(np.arange(len(out["natoms"]), dtype=np.int64), out["natoms"])
    if tensors == "torch":
        out = _to_torch(out)
    return out


_PER_ROW_KEYS = frozenset(f.key for f in FIELDS if f.per_atom)


def _to_torch(arrays: Dict[str, Any]) -> Dict[str, Any]:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("tensors='torch' needs torch (pip install torch)") from e
    out: Dict[str, Any] = {}
    for key, value in arrays.items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            out[key] = torch.from_numpy(np.ascontiguousarray(value))
        else:
            out[key] = value
    return out
