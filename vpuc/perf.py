"""Small performance helpers shared by the front end and the passes."""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector for a phase that builds many objects.

    Parsing and verifying a 100k-task program allocate millions of objects that
    all stay alive; every generation-2 collection rescans all of them, which
    made these phases several times slower.  Reference counting still frees
    what is dropped; cycles are collected when the phase ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
