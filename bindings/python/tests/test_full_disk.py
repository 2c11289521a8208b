"""A full disk under the Python writers: ``mrec.Writer`` and ``python -m
mrec import`` replacing a collection on a small tmpfs that fills
mid-write. Each raises (or exits 3 with) an error naming the path and the
free space left, leaves the collection it was to replace byte for byte as
it was, and leaves nothing else on the file system (no ``.partial``, no
lock file, no spill or scratch file); the process that met it writes
elsewhere as before.

The tmpfs is mounted in a private mount namespace (``unshare -m``, or
``unshare -rm`` in a user namespace) by a child process that runs the
test's body; where neither may mount, the tests skip with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List

import pytest

import workers

#: The tmpfs: room for the old collection and part of the new one.
SIZE = "1m"
#: Room for ``python -m mrec import``'s scratch rows as well: the
#: collection's own write fills it.
ROOM_FOR_SCRATCH = "5m"

#: Run in the child, on the tmpfs at MNT: the old collection, copied there,
#: overwritten by a larger one with ``mrec.Writer``; then a collection
#: written outside the tmpfs and read back. Prints what it saw as JSON.
WRITER = """
import json, os, shutil, sys
import numpy as np
import mrec

mnt, old, elsewhere = sys.argv[1:4]
out = os.path.join(mnt, "out.mrec.lmdb")
shutil.copyfile(old, out)
seen = {}
rng = np.random.default_rng(0)
try:
    with mrec.Writer(out, units={"length": "angstrom"}, overwrite=True) as w:
        for r in range(2000):
            w.append({"meta": {"r": r}, "trajectory": {"step": np.arange(4),
                      "blocks": {"atoms": {"columns": {"x": rng.normal(size=(4, 30))}}}}})
    seen["error"] = None
except OSError as e:
    seen["error"] = str(e)
seen["entries"] = sorted(os.listdir(mnt))
seen["same"] = open(out, "rb").read() == open(old, "rb").read()
with mrec.Writer(elsewhere, units={"length": "angstrom"}) as w:
    w.append({"meta": {"after": True}, "system": {"blocks": {"atoms": {"columns": {"x": np.zeros(2)}}}}})
seen["elsewhere"] = mrec.open(elsewhere)[0]["meta"]
print(json.dumps(seen))
"""

#: Run in the child: ``python -m mrec import`` of an extxyz file larger
#: than the tmpfs over the old collection, in a subprocess of its own.
IMPORT = """
import json, os, shutil, subprocess, sys

mnt, old, source = sys.argv[1:4]
out = os.path.join(mnt, "out.mrec.lmdb")
shutil.copyfile(old, out)
done = subprocess.run([sys.executable, "-m", "mrec", "import", "--quiet", "--overwrite", source, out],
                      capture_output=True, text=True)
print(json.dumps({"code": done.returncode, "stderr": done.stderr, "entries": sorted(os.listdir(mnt)),
                  "same": open(out, "rb").read() == open(old, "rb").read()}))
"""


def on_full_tmpfs(tmp_path: Path, size: str, body: str, *args: str) -> Dict[str, Any]:
    """Runs ``body`` (Python, arguments: the mount point, then ``args``) in
    a child with a tmpfs of ``size`` at ``tmp_path/mnt``, in a private
    mount namespace; returns the JSON it printed. Skips where no private
    tmpfs can be mounted."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "body.py"
    script.write_text(textwrap.dedent(body))
    shell = 'mount -t tmpfs -o size="$1" tmpfs "$2" || { echo "setup failed" >&2; exit 99; }; shift 2; exec "$@"'
    command = [sys.executable, str(script), str(mnt), *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    attempts: List[str] = []
    for flags in (["-m"], ["-r", "-m"]):
        try:
            done = subprocess.run(
                ["unshare", *flags, "--", "sh", "-c", shell, "sh", size, str(mnt), *command],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
        except FileNotFoundError as e:
            attempts.append(f"unshare: {e}")
            break
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
        if "setup failed" not in done.stderr and "unshare" not in done.stderr:
            raise AssertionError(f"the test's body failed: {done.stderr}")
        attempts.append(f"unshare {' '.join(flags)}: {done.stderr.strip()}")
    pytest.skip(f"no private tmpfs could be mounted ({'; '.join(attempts)})")


def free_said(message: str) -> int:
    """The free space an error reports (below the tmpfs's size)."""
    assert "its file system has " in message, message
    free = int(message.split("its file system has ")[1].split(" ")[0])
    assert free < 5 << 20, message
    return free


def test_a_writer_that_fills_the_disk_leaves_the_old_collection(tmp_path: Path) -> None:
    old = tmp_path / "old.mrec.lmdb"
    workers.make_collection(old, 3)
    seen = on_full_tmpfs(tmp_path, SIZE, WRITER, str(old), str(tmp_path / "elsewhere.mrec.lmdb"))
    assert seen["error"] is not None, f"the write did not fill the tmpfs: {seen}"
    assert str(tmp_path / "mnt" / "out.mrec.lmdb") in seen["error"], seen["error"]
    free_said(seen["error"])
    assert seen["entries"] == ["out.mrec.lmdb"], "left behind"
    assert seen["same"], "the old collection changed"
    assert seen["elsewhere"] == {"after": True}


@pytest.fixture(scope="module")
def extxyz_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3,000 structures of 20 atoms (3.4 MB of extxyz, 3 MiB of scratch
    rows, about 4 MiB of collection)."""
    ase_io = pytest.importorskip("ase.io")
    from ase import Atoms

    import numpy as np

    rng = np.random.default_rng(1)
    source = tmp_path_factory.mktemp("full-disk-source") / "source.extxyz"
    images = [Atoms("C20", positions=rng.normal(size=(20, 3)), info={"e": float(i)}) for i in range(3000)]
    ase_io.write(source, images, format="extxyz")
    return source


@pytest.mark.parametrize("size, fills", [(SIZE, "the scratch rows"), (ROOM_FOR_SCRATCH, "the collection")])
def test_python_m_mrec_import_that_fills_the_disk_leaves_the_old_collection(
    tmp_path: Path, extxyz_source: Path, size: str, fills: str
) -> None:
    old = tmp_path / "old.mrec.lmdb"
    workers.make_collection(old, 3)
    seen = on_full_tmpfs(tmp_path, size, IMPORT, str(old), str(extxyz_source))
    assert seen["code"] == 3, seen["stderr"]
    assert str(tmp_path / "mnt" / "out.mrec.lmdb") in seen["stderr"], seen["stderr"]
    # Which write met the full disk: the scratch file is named too.
    assert ("scratch.aselmdb" in seen["stderr"]) == (fills == "the scratch rows"), seen["stderr"]
    free_said(seen["stderr"])
    assert seen["entries"] == ["out.mrec.lmdb"], "left behind"
    assert seen["same"], "the old collection changed"
