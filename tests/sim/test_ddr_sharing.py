"""The DMA engine's DDR sharing: a transfer alone (the event loop's inline fast path, with
``DdrSharing.solo``'s numbers) is timed bit for bit as the general water-filling times it."""

from __future__ import annotations

import pytest

from runtime_sim.engines.dma import DdrSharing
from vpuc.cost.dma import Transfer


def general_join(sharing: DdrSharing, unit: int, t: float, transfer: Transfer) -> float:
    """``join`` through ``_retime`` even when nothing else is active."""
    sharing._advance(t)
    sharing.active[unit] = [float(transfer.nbytes), 0.0, transfer.cap, transfer.ddr_sides]
    return dict(sharing._retime(t))[unit]


@pytest.mark.parametrize("sides", [0, 1, 2])
@pytest.mark.parametrize("cap", [0.7, 10.0 / 3.0, 32.0, 64.0, 1e3])
@pytest.mark.parametrize("nbytes", [1, 4096, 12_345_677])
def test_a_transfer_alone_is_timed_as_water_filling_times_it(sides, cap, nbytes):
    transfer = Transfer(nbytes, 11.0, cap, sides, nbytes * sides)
    fast, slow = DdrSharing(19.2), DdrSharing(19.2)
    t = 1234.5678
    assert fast.join_alone(3, t, transfer) == general_join(slow, 3, t, transfer)
    assert fast.active == slow.active
    assert (fast.times, fast.rates) == (slow.times, slow.rates)
    nbytes_left, rate, used = fast.solo(transfer)
    assert fast.active[3] == [nbytes_left, rate, cap, sides]
    assert used == slow.rates[-1]
    # and a second transfer joining either is re-timed alike
    other = Transfer(5000, 3.0, 25.0, 1, 5000)
    assert fast.join(4, t + 7.25, other) == slow.join(4, t + 7.25, other)
