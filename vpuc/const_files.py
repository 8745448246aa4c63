"""Large constants as file references, loaded once, never spelled as VIR literals.

A ``const ... = file "PATH"`` names an ``.npy`` file.  Two kinds of path exist:

- a path on disk (absolute, or relative to the directory of the .vir file that
  names it), read with ``np.load`` once per process (keyed by the resolved path
  and the file's size and modification time, so an edited file is read again);
- an **in-memory** path ``mem:NAME.DIGEST.npy``: an array this process holds
  (an imported ONNX model's weights, weights the lowering rearranged or sliced),
  named by a content digest, so equal contents get one name and the name is the
  same in every run (blobs are reproducible).  Such a path means nothing to
  another process; a blob carries the constant's bytes anyway, so readers of a
  blob never need it.

Why: a 25 MB weight file printed as a VIR literal is ~300 MB of text, parsed
back by the lowering and stored as numbers in the blob (issue 11, section 5).
The arrays handed out are read-only: several constants may share one.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np

MEMORY_PREFIX = "mem:"
_MEMORY: dict[str, np.ndarray] = {}
_DISK: dict[tuple[str, int, int], np.ndarray] = {}
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def digest(array: np.ndarray) -> str:
    """A content digest of an array: dtype, shape and bytes."""
    h = hashlib.blake2b(digest_size=10)
    h.update(f"{array.dtype.str}{array.shape}".encode())
    # bytes through a uint8 view: ml_dtypes' types (bfloat16) have no buffer-protocol code
    h.update(np.ascontiguousarray(array).view(np.uint8).data)
    return h.hexdigest()


def hold(array: np.ndarray, hint: str = "c") -> str:
    """The in-memory path of ``array`` (kept for the life of the process)."""
    array = np.ascontiguousarray(array)
    name = _BAD_CHARS.sub("_", hint)[-48:] or "c"
    path = f"{MEMORY_PREFIX}{name}.{digest(array)}.npy"
    if path not in _MEMORY:
        if array.flags.writeable:          # the caller's array stays theirs to change
            array = array.copy()
        array.flags.writeable = False
        _MEMORY[path] = array
    return path


def is_memory(path: str) -> bool:
    return path.startswith(MEMORY_PREFIX)


def resolve(path: str, base_dir: str | Path | None) -> str:
    """The path a constant's ``file`` clause names, made independent of the current
    directory: in-memory and absolute paths as they are, relative ones from ``base_dir``."""
    if is_memory(path) or os.path.isabs(path):
        return path
    return os.path.abspath(os.path.join(base_dir if base_dir is not None else ".", path))


def load(path: str, base_dir: str | Path | None = None) -> np.ndarray:
    """The (read-only) array at ``path``; raises OSError or ValueError as ``np.load`` does."""
    if is_memory(path):
        try:
            return _MEMORY[path]
        except KeyError:
            raise OSError(f"{path} is an in-memory constant of another process "
                          "(the blob carries its bytes; the text does not)") from None
    full = resolve(path, base_dir)
    stat = os.stat(full)
    key = (full, stat.st_size, stat.st_mtime_ns)
    array = _DISK.get(key)
    if array is None:
        array = np.load(full, allow_pickle=False)
        array.flags.writeable = False
        _DISK[key] = array
    return array
