"""Writing output files so that nothing is ever half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vpuc.diagnostics import VpucError


def write_atomically(path: str | Path, data: str | bytes) -> None:
    """Write to a temp file beside ``path`` and rename it, so nothing is ever half-written."""
    target = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    if target.exists() and not target.is_file():
        # A device or pipe (say /dev/stdout): renaming over it would replace it.
        try:
            with open(target, mode) as handle:
                handle.write(data)
        except OSError as exc:
            raise VpucError(f"cannot write {path}: {exc.strerror}") from None
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    except OSError as exc:
        raise VpucError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, mode) as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
