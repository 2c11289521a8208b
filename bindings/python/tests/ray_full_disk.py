"""Run by test_ray_faults.py in a private mount namespace, where ``DISK``
is a small tmpfs: a Ray driver and its local cluster (both inside the
namespace) write a set onto ``DISK`` with ``mrec.ray.import_ase`` and
``mrec.ray.write``, then overwrite it with one too large for the disk.
Prints, as its last line, a JSON object of what happened (the errors,
what each directory held before and after, whether the previous sets
still read the same), then imports once more and runs a task: the Ray
session still works.

``python ray_full_disk.py DISK SMALL_DIR BIG_DIR SMALL_FILE BIG_FILE``:
two directories of ASE-LMDB sources, two collections (their serial
imports) to write through Ray."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Callable, Dict, List

import ray

import mrec
import mrec.ray
from conftest import record_json


def listing(d: str) -> List[str]:
    return sorted(n for n in os.listdir(d) if not n.endswith("-lock"))


def content(d: str) -> Dict[str, Any]:
    """What a set in ``d`` is: its manifest's bytes and its records'."""
    records = hashlib.sha256()
    with mrec.open(d) as c:
        n = len(c)
        for r in range(n):
            records.update(json.dumps(record_json(c[r]), sort_keys=True).encode())
    with open(os.path.join(d, "mrec-set.json"), "rb") as f:
        return {"manifest": hashlib.sha256(f.read()).hexdigest(), "records": records.hexdigest(), "n": n}


def overwrite(d: str, first: Callable[[], Any], second: Callable[[], Any]) -> Dict[str, Any]:
    first()
    before = {"listing": listing(d), "content": content(d)}
    out: Dict[str, Any] = {"before": before}
    try:
        second()
        out["error"] = None
    except Exception as e:  # noqa: BLE001 - reported to the test
        out["error"] = str(e)
        out["oserror"] = isinstance(e, OSError)
    out["after"] = {"listing": listing(d), "content": content(d)}
    return out


def main(disk: str, small: str, big: str, small_file: str, big_file: str) -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    result: Dict[str, Any] = {"disk": disk, "free": os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize}
    s = os.path.join(disk, "imported")
    result["import"] = overwrite(s, lambda: mrec.ray.import_ase(small, s), lambda: mrec.ray.import_ase(big, s, overwrite=True))
    w = os.path.join(disk, "written")
    result["write"] = overwrite(
        w,
        lambda: mrec.ray.write(mrec.ray.read(small_file), w, like=small_file),
        lambda: mrec.ray.write(mrec.ray.read(big_file), w, like=big_file, overwrite=True),
    )
    again = os.path.join(disk, "again")
    result["again"] = mrec.ray.import_ase(small, again).records
    result["task"] = ray.get(ray.remote(lambda: 42).remote())
    ray.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:6])
