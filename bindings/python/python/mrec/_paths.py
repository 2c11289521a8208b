"""Paths a user names: a file, a directory or a glob pattern."""

from __future__ import annotations

import glob
import os
from typing import List


def expand(path: str, pattern: str) -> List[str]:
    """``path`` as files: a directory's files matching ``pattern``
    (``*.mrec.lmdb``, ``*.aselmdb``), sorted; a glob pattern's matches,
    sorted; else ``path`` itself. A directory or pattern that names no file
    is a ``FileNotFoundError`` saying so."""
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(glob.escape(path), pattern)))
        if not found:
            raise FileNotFoundError(f"{path}: no {pattern} file in this directory")
        return found
    if any(ch in path for ch in "*?["):
        found = sorted(glob.glob(path))
        if not found:
            raise FileNotFoundError(f"{path}: no file matches")
        return found
    return [path]
