"""The VIR grammar's LALR tables, computed once per grammar and kept on disk.

Building the tables from ``grammar.lark`` takes seconds (lark's grammar
analysis); loading lark's pickled result takes a tenth of that.  The cache file
lives in ``$VPUC_CACHE_DIR`` (default ``$XDG_CACHE_HOME/vpuc``, else
``~/.cache/vpuc``), named by the grammar's digest and the lark and Python
versions, so a changed grammar or library never reads a stale file; lark
verifies the digest it writes in the file and builds afresh when a file is
unreadable (say, half written by a concurrent process).  When the folder cannot
be written, the tables are built in memory as before.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import lark


def cache_dir() -> Path:
    explicit = os.environ.get("VPUC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vpuc"


def cached_lark(grammar: str, **options) -> lark.Lark:
    """``lark.Lark(grammar, **options)`` (LALR), its tables read from the cache when present."""
    key = hashlib.sha256(grammar.encode()).hexdigest()[:20]
    version = f"{lark.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return lark.Lark(grammar, **options)
    # lark checks the file's own digest line and rebuilds (and rewrites) on any mismatch or
    # unreadable file, and ignores a failed write: the cache only ever saves time.
    return lark.Lark(grammar, cache=str(folder / f"vir-grammar-{key}-{version}.lark"), **options)
