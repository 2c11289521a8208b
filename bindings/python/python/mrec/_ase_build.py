"""``ase.Atoms`` with a single-point calculator, built from arrays this
package has just made and owns.

ASE's constructors check and copy every argument, and the calculator's
copies the whole ``Atoms``: together about three times what reading the
structure costs. Arrays that are already contiguous, of ASE's dtypes and
owned by nobody else need none of that, so :func:`build` fills the objects'
attributes directly. Whether that gives what the constructors give is
checked once per process, on a sample, attribute by attribute (an ASE
release that adds or changes one fails the check); where it does not, or
an input is not of that kind, the constructors are used.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Tuple

import numpy as np

_ASE: Optional[Tuple[Any, Any, Any]] = None
_FAST: Optional[bool] = None


def _classes() -> Tuple[Any, Any, Any]:
    """``Atoms``, ``SinglePointCalculator`` and ``Cell``, imported once."""
    global _ASE
    if _ASE is None:
        from ase import Atoms
        from ase.calculators.singlepoint import SinglePointCalculator
        from ase.cell import Cell

        _ASE = (Atoms, SinglePointCalculator, Cell)
    return _ASE


def atoms(numbers: np.ndarray, positions: np.ndarray, cell: np.ndarray, pbc: Any) -> Any:
    """``Atoms(numbers=, positions=, cell=, pbc=)``; the arrays are taken
    over where they can be (the caller gives up ``numbers``, ``positions``
    and ``cell``)."""
    n = len(numbers)
    if (
        _fast()
        and _owned(numbers, np.int64, (n,))
        and _owned(positions, np.float64, (n, 3))
        and _owned(cell, np.float64, (3, 3))
    ):
        return _new_atoms(numbers, positions, cell, pbc)
    return _classes()[0](numbers=numbers, positions=positions, cell=cell, pbc=pbc)


def attach(a: Any, results: Dict[str, Any]) -> None:
    """``a.calc = SinglePointCalculator(a, **results)`` (``results`` given
    up by the caller, its arrays taken over where they can be)."""
    Atoms, SinglePointCalculator, _ = _classes()
    if (
        _fast()
        and type(a) is Atoms
        and all(
            (type(v) is float and key in _KEPT_AS_GIVEN) or _owned(v, np.float64, None)
            for key, v in results.items()
        )
    ):
        a.calc = _new_calc(a, results)
    else:
        a.calc = SinglePointCalculator(a, **results)


# The properties ASE's single-point calculator keeps as given; it makes
# every other one a float array.
_KEPT_AS_GIVEN = frozenset(("energy", "free_energy", "magmom"))


def _new_atoms(numbers: np.ndarray, positions: np.ndarray, cell: np.ndarray, pbc: Any) -> Any:
    """An ``Atoms`` holding these very arrays, as its constructor would."""
    Atoms, _, Cell = _classes()
    a = object.__new__(Atoms)
    a._cellobj = Cell(cell)
    a._pbc = np.array(pbc, dtype=bool)
    a.arrays = {"numbers": numbers, "positions": positions}
    a._celldisp = np.zeros((3, 1))
    a._constraints = []
    a.info = {}
    a._calc = None
    return a


def _new_calc(a: Any, results: Dict[str, Any]) -> Any:
    """A single-point calculator of ``a`` holding ``results``, as its
    constructor would (with a copy of ``a``)."""
    calc = object.__new__(_classes()[1])
    for key, value in _CALC_PLAIN.items():
        setattr(calc, key, value)
    calc.parameters = type(_CALC_PARAMETERS)()
    calc.get_spin_polarized = calc._deprecated_get_spin_polarized
    calc.results = results
    calc.atoms = _copy(a)
    return calc


def _owned(x: Any, dtype: Any, shape: Optional[Tuple[int, ...]]) -> bool:
    """Whether ``x`` is an array ASE's constructor would have copied to
    exactly itself: of ``dtype`` (and ``shape``), C-contiguous, writeable,
    a view of nothing."""
    return (
        type(x) is np.ndarray
        and x.dtype == dtype
        and (shape is None or x.shape == shape)
        and x.base is None
        and x.flags.c_contiguous
        and x.flags.writeable
    )


def _copy(a: Any) -> Any:
    """``a.copy()``: what ``Atoms.copy`` makes, without its constructor."""
    _, _, Cell = _classes()
    c = object.__new__(type(a))
    c._cellobj = Cell(a._cellobj.array.copy())
    c._pbc = a._pbc.copy()
    c.arrays = {name: v.copy() for name, v in a.arrays.items()}
    c._celldisp = a._celldisp.copy()
    c._constraints = copy.deepcopy(a._constraints) if a._constraints else []
    c.info = dict(a.info)
    c._calc = None
    return c


# A calculator's attributes that are plain values, as ASE's constructor sets
# them (read from one it made, by `_fast`), and its `parameters` (empty).
_CALC_PLAIN: Dict[str, Any] = {}
_CALC_PARAMETERS: Any = None


def _fast() -> bool:
    """Whether :func:`atoms` and :func:`attach` give what ASE's
    constructors give, checked once on a sample."""
    global _FAST
    if _FAST is None:
        _classes()  # no ase: its ImportError, not a verdict
        try:
            _FAST = _check()
        except Exception:  # noqa: BLE001 (any surprise: the constructors)
            _FAST = False
    return _FAST


def _check() -> bool:
    global _CALC_PARAMETERS
    Atoms, SinglePointCalculator, _ = _classes()
    from ase.constraints import FixAtoms

    template = SinglePointCalculator(Atoms("H"), energy=0.0)
    plain = {"atoms", "results", "parameters", "get_spin_polarized"}
    for key, value in vars(template).items():
        if key not in plain:
            if not (value is None or type(value) in (str, bool, int, float)):
                return False
            _CALC_PLAIN[key] = value
    _CALC_PARAMETERS = template.parameters
    if len(_CALC_PARAMETERS) or type(template.get_spin_polarized).__name__ != "method":
        return False

    def sample(build: bool) -> Any:
        rng = np.random.default_rng(7)
        numbers = np.array([8, 1, 1], dtype=np.int64)
        positions = rng.random((3, 3))
        cell = np.diag([4.0, 5.0, 6.0]) + 0.1
        results = {"energy": -1.5, "forces": rng.random((3, 3)), "stress": rng.random(6)}
        if build:
            a = _new_atoms(numbers, positions, cell, (True, False, True))
        else:
            a = Atoms(numbers=numbers, positions=positions, cell=cell, pbc=(True, False, True))
        a.arrays["tags"] = np.array([0, 1, 2])
        a.set_constraint(FixAtoms(indices=[0]))
        a.info["charge"] = 1
        if build:
            a.calc = _new_calc(a, results)
        else:
            a.calc = SinglePointCalculator(a, **results)
        return a

    made, built = sample(False), sample(True)
    if not (_same(made, built) and _same(made.calc.atoms, built.calc.atoms)):
        return False
    if vars(made.calc).keys() != vars(built.calc).keys() or not _same_value(made.calc.results, built.calc.results):
        return False
    if _shares(built, built.calc.atoms):
        return False
    if built.calc.check_state(built) != [] or built.calc.get_property("stress", built) is None:
        return False
    built.positions[0, 0] += 1.0
    made.positions[0, 0] += 1.0
    return made.calc.check_state(made) == built.calc.check_state(built) != []


def _shares(a: Any, b: Any) -> bool:
    """Whether two ``Atoms`` share a mutable attribute or an array."""
    if any(vars(a)[k] is vars(b)[k] for k in vars(a).keys() & vars(b).keys() if vars(a)[k] is not None):
        return True
    if a._cellobj.array is b._cellobj.array:
        return True
    return any(np.shares_memory(x, y) for x in a.arrays.values() for y in b.arrays.values())


def _same(x: Any, y: Any) -> bool:
    """Two ``Atoms`` with the same attributes, of the same types and values
    (the calculator aside)."""
    if type(x) is not type(y) or vars(x).keys() != vars(y).keys():
        return False
    return all(key == "_calc" or _same_value(vars(x)[key], vars(y)[key]) for key in vars(x))


def _same_value(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, np.ndarray):
        return x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same_value(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return len(x) == len(y) and all(_same_value(p, q) for p, q in zip(x, y))
    if hasattr(x, "todict"):
        return _same_value(x.todict(), y.todict())
    if hasattr(x, "array"):  # Cell
        return _same_value(x.array, y.array)
    return bool(x == y)
