"""Reading the files a user names on the command line, with plain error messages.

``read_bytes(path)`` reads a file, or standard input for ``-``; a path that
cannot be read is a ``VpucError`` saying what is wrong in words (``is a
directory``, ``no such file``, ``permission denied``), never an errno number.
``decode_text(data, name)`` decodes UTF-8 and names the line and column of the
first byte that is not UTF-8, never a codec name.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

from vpuc.fileio import not_utf8
from vpuc.diagnostics import VpucError

STDIN = "-"
STDIN_NAME = "<stdin>"

# What the usual reasons a file cannot be read mean, in words.
_REASONS = {
    errno.ENOENT: "no such file",
    errno.EISDIR: "it is a directory, not a file",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ENAMETOOLONG: "the file name is too long",
    errno.ELOOP: "too many symbolic links",
}


def display_name(path: str | Path) -> str:
    """How diagnostics name an input: ``<stdin>`` for ``-``, else the path as given."""
    return STDIN_NAME if str(path) == STDIN else str(path)


def reason(exc: OSError) -> str:
    """Why an OSError happened, in words (never ``[Errno N]``)."""
    return _REASONS.get(exc.errno, (exc.strerror or "failed").lower())


def make_directory(path: str | Path, what: str = "the directory") -> Path:
    """``path`` as a directory, created with its parents if needed."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise VpucError(f"cannot create {what} {path}: a file of that name exists") from None
    except OSError as exc:
        raise VpucError(f"cannot create {what} {path}: {reason(exc)}") from None
    return target


def read_bytes(path: str | Path, what: str = "") -> bytes:
    """The bytes of ``path`` (standard input for ``-``); ``what`` says what the file was
    expected to be, for the message (``"the .vir file"``)."""
    if str(path) == STDIN:
        return sys.stdin.buffer.read()
    target = Path(path)
    try:
        if target.is_dir():           # open() on a directory succeeds on some systems
            raise IsADirectoryError(errno.EISDIR, "")
        return target.read_bytes()
    except OSError as exc:
        raise VpucError(f"cannot read {what + ' ' if what else ''}{path}: {reason(exc)}") \
            from None


def decode_text(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text; a byte that is not UTF-8 is an error at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(name, exc, "VIR") from None


def read_text(path: str | Path, what: str = "") -> str:
    """``read_bytes`` then ``decode_text``."""
    return decode_text(read_bytes(path, what), display_name(path))
