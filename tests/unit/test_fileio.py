"""write_atomically: no partial file, no temp file left by a killed writer, the umask's mode."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vpuc import fileio
from vpuc.fileio import remove_stale_temps, write_atomically

REPO = Path(__file__).resolve().parents[2]


def test_output_mode_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomically(tmp_path / "a.blob", b"x")
        os.umask(0o027)
        write_atomically(tmp_path / "b.blob", "text")
    finally:
        os.umask(old)
    assert (tmp_path / "a.blob").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.blob").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "b.blob").read_text() == "text"


def test_named_fallback_gives_the_same_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fileio, "_write_unnamed", lambda directory, temp, payload: False)
    old = os.umask(0o022)
    try:
        write_atomically(tmp_path / "a.blob", b"payload")
    finally:
        os.umask(old)
    assert (tmp_path / "a.blob").read_bytes() == b"payload"
    assert (tmp_path / "a.blob").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.blob"]


def _killed_writer(tmp_path: Path, patch: str) -> None:
    """Run write_atomically in a child that stops at ``patch`` and SIGKILL it there."""
    script = textwrap.dedent("""
        import os, sys, time
        from vpuc import fileio
        def stop(*args, **kwargs):
            print("ready", flush=True)
            time.sleep(60)
    """) + patch + """
fileio.write_atomically(sys.argv[1], b"z" * (4 << 20))
"""
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "out.blob")],
                             stdout=subprocess.PIPE, cwd=REPO, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="O_TMPFILE is Linux's")
def test_a_writer_killed_while_writing_leaves_nothing(tmp_path):
    # Stop after the data is written, before it has a name.
    _killed_writer(tmp_path, "real = fileio._write_all\n"
                   "fileio._write_all = lambda fd, data: (real(fd, data), stop())")
    assert list(tmp_path.iterdir()) == []


def test_a_temp_left_by_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    # Stop between the link and the rename: a complete temp file is left behind ...
    _killed_writer(tmp_path, "fileio.os.replace = stop")
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".out.blob.") and left[0].endswith(".tmp")
    # ... and the next write of the same destination removes it.
    write_atomically(tmp_path / "out.blob", b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.blob"]
    assert (tmp_path / "out.blob").read_bytes() == b"new"


def test_temps_of_running_writers_and_other_files_are_kept(tmp_path):
    mine = tmp_path / f".out.blob.{os.getppid()}.0.tmp"       # the parent is alive
    other = tmp_path / ".other.blob.999999999.0.tmp"
    lookalike = tmp_path / ".out.blob.tmp"
    for path in (mine, other, lookalike):
        path.write_bytes(b"")
    assert remove_stale_temps(tmp_path / "out.blob") == []
    assert mine.exists() and other.exists() and lookalike.exists()
