"""What a path walk finds (``path_walk.walk``): the executed path's steps, its guards,
the ``Walk`` the path batch runs from, and why an entry is refused instead.

``path_batch`` evaluates a walk's guards and footprints per iteration,
``path_relocate`` replays a remembered walk for moved buffers, ``entry_cache`` keeps
the proofs made for one; all of them read these records, which only ``path_walk``
makes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime_sim.isa.loop_bounds import Affine, Footprint


class PathRefused(Exception):
    """Why this entry of the loop is not run as a path batch.  ``structural``: the
    loop's code decides it (a path too long), so no later entry can do better;
    ``recurs``: the next entry would most likely be refused too."""

    def __init__(self, reason: str, structural: bool = False, recurs: bool = True) -> None:
        super().__init__(reason)
        self.structural, self.recurs = structural, recurs


@dataclass(frozen=True)
class Guard:
    """``condition(a(k), b(k)) == expected`` must hold in iteration k."""

    condition: str
    a: Affine
    b: Affine
    expected: bool


@dataclass
class PathStep:
    """One executed instruction: its index in .text and what the batch does with it."""

    index: int
    op: object                                     # _Op: fn, reads, writes
    role: str                                      # run, skip, affine, promoted_load/store
    values: dict[int, Affine] = field(default_factory=dict)   # affine results (role affine)
    address: int | None = None                     # promoted word
    size: int = 0                                  # its bytes
    taken: bool = False                            # a control transfer the path takes


@dataclass
class Walk:
    path: list[PathStep]
    guards: list[Guard]
    footprints: list[Footprint]
    promoted: dict[int, int]                       # address -> bytes
    carried: dict[int, Affine]                     # register -> value at the loop head
    end: dict[int, Affine | None]                  # scalar -> value after the iteration
    back: Guard                                    # the back-edge, taken while it holds
    read_words: dict[int, bytes] = field(default_factory=dict)   # promoted words as read
    checks: object = None                          # entry_cache.PathChecks, once batched
    inner: dict | None = None                      # path_inner's uniform inner loops
    bases: list = field(default_factory=list)      # per footprint: base + offset, mod 2^32
    relocation: object = None                      # path_relocate's analysis, once asked
    # what depends only on the path, its roles and promoted words (its timing, inner-loop
    # layouts, promoted footprints), worked out once: a relocated walk shares it
    shared: dict = field(default_factory=dict)
    # path_relocate's walks relocated from this one, by the words read: held here, not in
    # ``shared`` (which the relocated walks hold too), so no walk sits in a reference cycle
    moved: dict | None = None
