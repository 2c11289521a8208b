"""What the multiprocessing tests run in their workers (importable by
spawned children), and the synthetic collection they read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import mrec

ELEMENTS = np.array(["H", "C", "N", "O", "S"], dtype=object)
NUMBERS = np.array([1, 6, 7, 8, 16], dtype=np.uint64)

# Set before a fork pool starts: the children inherit it (with its open
# reader) instead of unpickling it.
INHERITED: Optional[mrec.Collection] = None


def make_collection(path: Path, n_records: int, seed: int = 7) -> None:
    """Records of 3-20 atoms and 1-12 frames; every fifth record has a
    ragged trajectory block `events`; every seventh has no trajectory."""
    rng = np.random.default_rng(seed)
    with mrec.Writer(path, units={"length": "angstrom", "energy": "eV"}) as w:
        codes = []
        for r in range(n_records):
            n_atoms = int(rng.integers(3, 21))
            kinds = rng.integers(0, len(ELEMENTS), n_atoms)
            system = {
                "meta": {"charge": int(rng.integers(-1, 2))},
                "blocks": {
                    "atoms": {
                        "columns": {
                            "element": ELEMENTS[kinds],
                            "atomic_number": NUMBERS[kinds],
                        }
                    }
                },
            }
            trajectory: Optional[Dict[str, Any]] = None
            if r % 7 != 3:
                n_frames = int(rng.integers(1, 13))
                xyz = rng.normal(size=(3, n_frames, n_atoms))
                atoms: Dict[str, Any] = {"columns": {"x": xyz[0], "y": xyz[1], "z": xyz[2]}}
                blocks: Dict[str, Any] = {"atoms": atoms}
                if r % 5 == 0:
                    # A trajectory-only block of 0-4 rows per frame, emptied
                    # at the last frame: ragged, flat rows with offsets.
                    counts = rng.integers(0, 5, n_frames)
                    counts[-1] = 0
                    offsets = np.concatenate([[0], np.cumsum(counts)])
                    blocks["events"] = {
                        "offsets": offsets,
                        "columns": {"energy": rng.normal(size=int(offsets[-1]))},
                    }
                trajectory = {
                    "step": np.arange(n_frames, dtype=np.int64) * 10,
                    "meta": {"pe": rng.normal(size=n_frames)},
                    "blocks": blocks,
                }
            w.append(meta={"code": f"m{r}"}, system=system, trajectory=trajectory)
            codes.append(f"m{r}")
        w.finish(index={"code": np.array(codes, dtype=object)})


def digest(record: Dict[str, Any]) -> Tuple[Any, ...]:
    """A record's content, summed: equal records have equal digests."""
    t = record["trajectory"]
    if t is None:
        return (record["meta"]["code"], None)
    cols = t["blocks"]["atoms"]["columns"]
    return (
        record["meta"]["code"],
        int(t["step"].sum()),
        float(t["meta"]["pe"].sum()),
        float(sum(float(np.sum(cols[k])) for k in ("x", "y", "z"))),
        int(t["blocks"]["atoms"]["count"].sum()),
        float(t["blocks"]["events"]["columns"]["energy"].sum()) if "events" in t["blocks"] else None,
    )


def read_digests(args: Tuple[mrec.Collection, List[int]]) -> List[Tuple[int, Tuple[Any, ...], int]]:
    c, indices = args
    return [(r, digest(c[r]), os.getpid()) for r in indices]


def read_inherited(indices: List[int]) -> List[Tuple[int, Tuple[Any, ...], int]]:
    assert INHERITED is not None
    return read_digests((INHERITED, indices))


def dataset_item(args: Tuple[mrec.Dataset, int]) -> Any:
    ds, i = args
    return ds[i]


def code_of(record: Dict[str, Any]) -> str:
    return str(record["meta"]["code"])


def read_and_say_what_opened(args: Tuple[mrec.Collection, List[int]]) -> Tuple[List[Tuple[Any, ...]], List[int]]:
    """Records of a (set) collection read in a worker, and the shards the
    worker opened to read them."""
    c, indices = args
    return [digest(c[r]) for r in indices], c.open_shards()
