"""Cross-segment waits thinned to a few anchors, so they hold few barriers (``schedule_deps``).

Rule 1 of ``schedule_deps`` makes a DMA of a later segment wait on the latest DMA of an
earlier segment per channel that touches its DDR bytes, through a barrier only that DMA
updates.  A later segment pipelined block by block on an earlier one of many blocks then
waits on one barrier per earlier block, and each lives until the later segment's load that
waits on it, queued behind all the earlier segment's loads: MaxPool 13x13 at
``cmx_budget`` 4096 (a cascade of two pools, some 190 blocks each) kept 70 such barriers
live and ran out of the 64 physical ones.

A channel's FIFO ends its transfers in list order, so waiting on a later DMA of the same
channel implies the earlier one.  ``thin_waits`` keeps at most ``cap`` distinct earlier DMAs
per (later segment, channel): every ``g``-th of the ones waited on, counted back from the
last, each wait moved to the first anchor at or after it that the waiting DMA follows in
the list (else it stays).  A later block then waits at most ``g - 1`` more earlier stores.
"""

from __future__ import annotations

import bisect
import math


def thin_waits(needs: dict[int, dict[int, tuple[int, object]]], segment: dict[int, int],
               position: dict[int, int], cap: int) -> None:
    """``needs``: id(later DMA) -> channel -> (list position, earlier DMA), changed in place;
    ``segment``: id(task) -> its segment; ``position``: id(DMA) -> its place in the list."""
    groups: dict[tuple[int, int], dict[int, object]] = {}
    for later, per_channel in needs.items():
        for channel, (pos, earlier) in per_channel.items():
            groups.setdefault((segment[later], channel), {})[pos] = earlier
    anchors_of: dict[tuple[int, int], list[int]] = {}
    for key, found in groups.items():
        if len(found) > cap:
            ordered = sorted(found)
            step = math.ceil(len(ordered) / cap)
            anchors_of[key] = ordered[::-1][::step][::-1]      # the last one always
    if not anchors_of:
        return
    for later, per_channel in needs.items():
        for channel, (pos, _) in list(per_channel.items()):
            anchors = anchors_of.get((segment[later], channel))
            if anchors is None:
                continue
            i = bisect.bisect_left(anchors, pos)
            if i < len(anchors) and anchors[i] < position[later]:
                per_channel[channel] = (anchors[i], groups[(segment[later], channel)][anchors[i]])
