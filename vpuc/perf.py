"""Small performance helpers shared by the front end, the passes and the simulator."""

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


def to_oldest_generation() -> None:
    """Move every object the cyclic collector tracks to its oldest generation, unexamined.

    Called at the end of a paused phase whose objects mostly stay alive (a simulation's
    caches, plan and timeline): the first young collection after the phase would examine
    every one of them at once (a cold timing-only simulation of the encoder: 8 ms);
    in the oldest generation they wait for the next full collection, which still frees
    any cycle among them.  ``gc.freeze`` then ``gc.unfreeze`` is the move; objects someone
    froze on purpose (``gc.get_freeze_count``) are left frozen.
    """
    if gc.get_freeze_count():
        return
    gc.freeze()
    gc.unfreeze()


@contextmanager
def single_threaded_blas():
    """Run numpy's BLAS (the DPU's matrix products) on one thread for a phase.

    A simulated DPU workload is a small matrix product (an attention head, one
    tile of a convolution): OpenBLAS's threads cost more to wake and synchronize
    than they save, and on a machine whose cores are busy they spin for their
    turn -- the encoder's 63 products took 0.6 s of CPU on two threads, 0.015 s
    on one.  The simulation is single-threaded like its onnxruntime peer.
    """
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=1, user_api="blas"):
        yield
