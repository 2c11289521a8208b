"""Shared helpers of the pytest suite: the repository's fixtures, the Rust
`mrec` command line (the reference the Python side is compared with), and a
canonical-JSON view of what the Python side reads."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures"
SUITE = REPO / "suites" / "collection.toml"


@pytest.fixture
def ctrl_c() -> Any:
    """Ctrl-C as an interactive session has it, whatever this process
    inherited (a job started in the background by a non-interactive shell
    ignores SIGINT, and Python then installs no handler): here Python's
    own handler for the test's duration; yields what a child process runs
    first (``preexec_fn``) to get the default back."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session")
def small_collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A collection of 30 small synthetic records (`workers.make_collection`),
    some 25 batches at 60 atoms a batch: what the loader tests iterate."""
    import workers

    out = tmp_path_factory.mktemp("small") / "small.mrec.lmdb"
    workers.make_collection(out, 30)
    return out


def mrec_binary() -> Optional[str]:
    """The `mrec` CLI: $MREC_BIN, else the workspace's release build, else PATH."""
    env = os.environ.get("MREC_BIN")
    if env:
        return env
    for candidate in (REPO / "target" / "release" / "mrec",):
        if candidate.is_file():
            return str(candidate)
    return shutil.which("mrec")


@pytest.fixture(scope="session")
def mrec_cli() -> str:
    """The CLI, or a skip (a failure when MREC_REQUIRE_CLI=1, as in .ci/run)."""
    path = mrec_binary()
    if path is None or not os.path.isfile(path):
        if os.environ.get("MREC_REQUIRE_CLI") == "1":
            pytest.fail("the mrec CLI is required (MREC_REQUIRE_CLI=1) but was not found")
        pytest.skip("no mrec CLI: cargo build --release -p mrec-cli, or set MREC_BIN")
    return path


def write_with_cli(cli: str, fixture: Path, out: Path) -> None:
    subprocess.run([cli, "write", str(fixture), str(out)], check=True, capture_output=True)


def dump_with_cli(cli: str, path: Path) -> Dict[str, Any]:
    done = subprocess.run([cli, "dump", str(path)], check=True, capture_output=True)
    return json.loads(done.stdout)


def positive_cases() -> List[Dict[str, Any]]:
    """The suite's cases whose fixture a writer must take and a reader
    hand back: kind round-trip or read-accept, a fixture, no recipe."""
    if sys.version_info < (3, 11):  # tomllib
        return []
    import tomllib

    with open(SUITE, "rb") as f:
        suite = tomllib.load(f)
    return [
        c
        for c in suite["case"]
        if c["kind"] in ("round-trip", "read-accept") and "fixture" in c and "recipe" not in c
    ]


def refusal_cases() -> List[Dict[str, Any]]:
    if sys.version_info < (3, 11):
        return []
    import tomllib

    with open(SUITE, "rb") as f:
        suite = tomllib.load(f)
    return [c for c in suite["case"] if c["kind"] == "write-refusal" and "fixture" in c]


# -- canonical JSON of what Python reads (docs/canonical-json.md) -----------

_DTYPES = {
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "bool",
    "object": "string",
    "complex64": "c64",
    "complex128": "c128",
}


def typed_f64(x: float) -> Any:
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def typed_int(v: int) -> Any:
    v = int(v)
    return v if abs(v) <= 2**53 else str(v)


def typed(value: Any, dtype: str) -> Any:
    if dtype == "f64":
        return typed_f64(value)
    if dtype in ("c64", "c128"):
        return [typed_f64(value.real), typed_f64(value.imag)]
    if dtype == "bool":
        return bool(value)
    if dtype == "string":
        assert isinstance(value, str), value
        return value
    return typed_int(value)


def column_json(values: np.ndarray, mask: Any = None, precision: Any = None) -> Dict[str, Any]:
    assert isinstance(values, np.ndarray), type(values)
    dtype = _DTYPES[values.dtype.name]
    out: Dict[str, Any] = {
        "dtype": dtype,
        "shape": list(values.shape),
        "values": [typed(v, dtype) for v in values.reshape(-1)],
    }
    if mask is not None:
        assert mask.dtype == np.bool_ and mask.shape == values.shape[:1]
        if not mask.all():
            out["validity"] = [bool(b) for b in mask]
    if precision is not None:
        out["precision"] = typed_f64(precision)
    return out


def cell_json(vectors: Any, origin: Any, boundary: Any, defined: Any) -> Dict[str, Any]:
    return {
        "vectors": [[typed_f64(x) for x in row] for row in np.asarray(vectors)],
        "origin": [typed_f64(x) for x in origin],
        "boundary": [bool(b) for b in boundary],
        "cell_defined": bool(defined),
    }


def system_json(system: Dict[str, Any]) -> Dict[str, Any]:
    blocks = {}
    for name, b in system["blocks"].items():
        block: Dict[str, Any] = {
            "count": b["count"],
            "columns": {
                col: column_json(v, b["validity"].get(col), b["precision"].get(col))
                for col, v in b["columns"].items()
            },
        }
        if b["structural_shape"] is not None:
            block["structural_shape"] = list(b["structural_shape"])
        if b["targets"]:
            block["targets"] = dict(b["targets"])
        if b["attributes"]:
            block["attributes"] = b["attributes"]
        blocks[name] = block
    out: Dict[str, Any] = {
        "meta": system["meta"],
        "meta_types": system["meta_types"],
        "blocks": blocks,
    }
    if system["cell"] is not None:
        c = system["cell"]
        out["box"] = cell_json(c["vectors"], c["origin"], c["boundary"], c["defined"])
    return out


def meta_value(values: Any, tag: str, k: int) -> Any:
    if tag == "json":
        return values[k]
    if tag.startswith("bool"):
        dtype = "bool"
    elif tag.startswith("f64"):
        dtype = "f64"
    elif tag == "string":
        dtype = "string"
    else:
        dtype = "i64"  # every integer tag: typed JSON integers
    if values.ndim == 2:
        return [typed(v, dtype) for v in values[k]]
    return typed(values[k], dtype)


def trajectory_json(t: Dict[str, Any]) -> Dict[str, Any]:
    n = t["n_frames"]
    assert t["step"].dtype == np.int64 and t["step"].shape == (n,)
    frames = []
    for k in range(n):
        frame: Dict[str, Any] = {"step": typed_int(t["step"][k])}
        if t["time"] is not None:
            frame["time"] = typed_f64(t["time"][k])
        frame["meta"] = {
            key: meta_value(values, t["meta_types"][key], k) for key, values in t["meta"].items()
        }
        blocks = {}
        for name, b in t["blocks"].items():
            if not b["present"][k]:
                continue
            count = int(b["count"][k])
            if "offsets" in b:
                lo, hi = int(b["offsets"][k]), int(b["offsets"][k + 1])
                assert hi - lo == count
                rows = lambda a: a[lo:hi]  # noqa: E731
            else:
                rows = lambda a: a[k]  # noqa: E731
            block: Dict[str, Any] = {
                "count": count,
                "columns": {
                    col: column_json(
                        rows(v), rows(b["validity"][col]) if col in b["validity"] else None
                    )
                    for col, v in b["columns"].items()
                },
            }
            if b["structural_shape"] is not None and count > 0:
                block["structural_shape"] = list(b["structural_shape"])
            if b["targets"]:
                block["targets"] = dict(b["targets"])
            blocks[name] = block
        frame["blocks"] = blocks
        cell = t["cell"]
        if cell is not None and cell["present"][k]:
            frame["box"] = cell_json(
                cell["vectors"][k], cell["origin"][k], cell["boundary"][k], cell["defined"][k]
            )
        frames.append(frame)
    return {"frames": frames}


def record_json(r: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"meta": r["meta"]}
    if r["system"] is not None:
        out["system"] = system_json(r["system"])
    if r["trajectory"] is not None:
        out["trajectory"] = trajectory_json(r["trajectory"])
    return out


def collection_json(c: Any) -> Dict[str, Any]:
    """What `mrec dump` prints, built from what the Python side reads."""
    out: Dict[str, Any] = {"meta": c.meta, "sequence_schema": c.schema}
    own = c.own_index()
    if own:
        validity, precision = c.index_validity, c.index_precision
        out["index"] = {
            k: column_json(v, validity.get(k), precision.get(k)) for k, v in own.items()
        }
    if c.forcefield is not None:
        out["forcefield"] = c.forcefield
    out["records"] = [record_json(c[r]) for r in range(len(c))]
    return out


def same(a: Any, b: Any, at: str = "") -> None:
    """Exact equality of two JSON values: types (bool is not int, int is not
    float) and float bits (-0.0 is not 0.0); raises AssertionError with the
    path of the first difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{at}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            same(a[k], b[k], f"{at}.{k}")
        return
    if isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{at}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{at}[{i}]")
        return
    assert type(a) is type(b), f"{at}: {a!r} ({type(a).__name__}) != {b!r} ({type(b).__name__})"
    if isinstance(a, float):
        assert a == b and math.copysign(1, a) == math.copysign(1, b), f"{at}: {a!r} != {b!r}"
    else:
        assert a == b, f"{at}: {a!r} != {b!r}"
