"""Writing output files so that nothing is ever half-written, and nothing is left behind.

The data goes to an unnamed file in the destination's directory (Linux
``O_TMPFILE``), which gets a name only once it is complete: ``linkat`` (through
``/proc/self/fd``, or with ``AT_EMPTY_PATH``) to a temp name, then ``rename``
over the destination.  A
process killed while writing leaves nothing; one killed in the instant between
the link and the rename leaves a complete temp file, ``.NAME.PID.N.tmp``.  Where
``O_TMPFILE`` is missing (other systems, some file systems) the data is written
to that temp name directly.  Either way the next write of the same destination
removes the temp files whose process is gone.

Files are created with mode 0666 less the user's umask (0644 typically), like
any other tool's output.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

from vpuc.diagnostics import Loc, VpucError

_counter = itertools.count()


def write_atomically(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if target.exists() and not target.is_file():
        # A device or pipe (say /dev/stdout): renaming over it would replace it.
        try:
            with open(target, "wb") as handle:
                handle.write(payload)
        except OSError as exc:
            raise VpucError(f"cannot write {path}: {exc.strerror}") from None
        return
    directory = target.parent
    try:
        remove_stale_temps(target)
        temp = directory / f".{target.name}.{os.getpid()}.{next(_counter)}.tmp"
        if not _write_unnamed(directory, temp, payload):
            _write_named(temp, payload)
    except OSError as exc:
        raise VpucError(f"cannot write {path}: {exc.strerror}") from None
    try:
        os.replace(temp, target)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise VpucError(f"cannot write {path}: {exc.strerror}") from None
        raise


def _write_unnamed(directory: Path, temp: Path, payload: bytes) -> bool:
    """Write into an O_TMPFILE file and link it as ``temp``; False where that is unsupported."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return False
    try:
        fd = os.open(directory, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        if exc.errno in (_errno("EOPNOTSUPP"), _errno("EISDIR"), _errno("EINVAL")):
            return False         # the kernel or the file system has no O_TMPFILE
        raise
    try:
        _write_all(fd, payload)
        return _link_fd(fd, temp)
    finally:
        os.close(fd)


def _link_fd(fd: int, temp: Path) -> bool:
    """Give the unnamed file ``fd`` the name ``temp``: linkat through /proc/self/fd, or
    with AT_EMPTY_PATH (which needs CAP_DAC_READ_SEARCH); False when neither works."""
    try:
        os.link(f"/proc/self/fd/{fd}", temp, follow_symlinks=True)
        return True
    except OSError:
        pass                     # no /proc, or a sandbox that refuses the link
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        at_fdcwd, at_empty_path = -100, 0x1000
        return libc.linkat(fd, b"", at_fdcwd, os.fsencode(temp), at_empty_path) == 0
    except (OSError, AttributeError):
        return False


def _write_named(temp: Path, payload: bytes) -> None:
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        _write_all(fd, payload)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the temp files of ``target`` left by writers that no longer run; return them."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(\d+)\.\d+\.tmp$")
    removed = []
    try:
        names = os.listdir(target.parent)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if match and not _running(int(match.group(1))):
            stale = target.parent / name
            try:
                stale.unlink()
                removed.append(stale)
            except OSError:
                pass             # another writer removed it first, or it is not ours to remove
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return False             # our own: no write of ours is in progress while we clean
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True              # someone else's live process (or a pid we cannot test)
    return True


def _errno(name: str) -> int:
    import errno
    return getattr(errno, name, -1)


def not_utf8(path: str | Path, exc: UnicodeDecodeError, what: str) -> VpucError:
    """The error for a text file that is not UTF-8, at the line and column of its first
    bad byte (``what`` names the kind of file: "VIR", "assembly")."""
    before = exc.object[:exc.start]
    line = before.count(b"\n") + 1
    col = len(before[before.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
    return VpucError(f"byte 0x{exc.object[exc.start]:02x} is not UTF-8 text; {what} files are "
                     "UTF-8", Loc(str(path), line, col))
