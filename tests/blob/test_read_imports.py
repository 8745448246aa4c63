"""Reading a blob in a fresh process imports what reading needs: not the SHAVE
assembler (``vpuc.shave`` exports its names on first use, the kernel library assembles
on request), whichever format, a library kernel's image included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vpuc.api import compile as compile_program
from vpuc.blob import write_blob

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from pathlib import Path
from vpuc.blob import read_blob
program = read_blob(open(sys.argv[1], "rb").read(), sys.argv[1])
assert program.kernels, "the blob carries a kernel image"
print(sorted(m for m in sys.modules if m.startswith("vpuc.shave.")))
print("vpuc.shave.assembler" in sys.modules, "vpuc.kernel_library" in sys.modules)
"""


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_reading_a_blob_does_not_import_the_assembler(fmt, tmp_path):
    path = tmp_path / f"clamp.{fmt}"
    path.write_bytes(write_blob(compile_program(REPO / "examples" / "clamp.vir"), fmt))
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    modules, flags = done.stdout.splitlines()
    assert "vpuc.shave.kernel_notes" in modules      # the kernel's notes were read
    assert flags.split()[0] == "False", modules
