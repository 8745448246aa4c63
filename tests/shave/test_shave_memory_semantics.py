"""The ISA's memory instructions against numpy references: scalar loads, stores and
pairs; strided, masked and broadcast vector loads; faults naming the address and window;
the per-row access paths; scatters (split from ``test_shave_semantics``)."""

import numpy as np
import pytest

from runtime_sim.isa.sem_values import lanes
from shave_testlib import WIN_D, WIN_E, WIN_F, make_memory, semantics_of as op, u32, vec
from vpuc.diagnostics import VpucError

RNG = np.random.default_rng(7)


def test_scalar_loads_stores_and_pairs():
    mem, arrays = make_memory()
    arrays["WIN_F"][:8] = [0x80, 0xFF, 0x01, 0x00, 0x88, 0x77, 0x66, 0x55]
    base = np.uint32(WIN_F)
    assert op("lb")(mem, base, np.uint32(0)) == 0xFFFFFF80
    assert op("lbu")(mem, base, np.uint32(0)) == 0x80
    assert op("lh")(mem, base, np.uint32(0)) == 0xFFFFFF80 and op("lhu")(mem, base, np.uint32(0)) == 0xFF80
    assert op("lw")(mem, base, np.uint32(0)) == 0x0001FF80
    assert op("ld")(mem, base, np.uint32(0)) == (0x0001FF80, 0x55667788)
    op("sd")(mem, np.uint32(0x11223344), np.uint32(0xAABBCCDD), np.uint32(WIN_E), np.uint32(8))
    op("sh")(mem, np.uint32(0x12345678), np.uint32(WIN_E + 20), np.uint32(0xFFFFFFFC))
    assert arrays["WIN_E"][8:18].tobytes() == bytes.fromhex("44332211ddccbbaa7856")


def test_strided_masked_and_broadcast_loads():
    mem, arrays = make_memory()
    arrays["WIN_F"][:256] = np.arange(256, dtype=np.uint8)
    got = op("vlds.h")(mem, np.uint32(WIN_F + 200), np.uint32(0), np.uint32(0xFFFFFFF0))   # -16
    assert list(lanes(got, np.uint16)) == [int.from_bytes(bytes([200 - 16 * i, 201 - 16 * i]), "little")
                                           for i in range(8)]
    assert list(op("vldb.w")(mem, np.uint32(WIN_F), np.uint32(4))) == [4, 5, 6, 7] * 4
    # a masked tail load at the very end of the window does not touch missing bytes
    end = np.uint32(WIN_F + arrays["WIN_F"].size - 6)
    tail = op("vld.m")(mem, end, np.uint32(0), op("vmask.h")(np.uint32(3)))
    assert list(tail[:6]) == list(arrays["WIN_F"][-6:]) and not tail[6:].any()
    op("vst.m")(mem, vec(np.full(8, 0x4242), np.uint16), end, np.uint32(0), op("vmask.h")(np.uint32(3)))
    assert (arrays["WIN_F"][-6:] == 0x42).all()
    strided = op("vsts.m.w")
    strided(mem, vec([1, 2, 3, 4], np.uint32), np.uint32(WIN_E), np.uint32(0), np.uint32(32),
            op("vmask.w")(np.uint32(2)))
    assert list(arrays["WIN_E"][[0, 32, 64]]) == [1, 2, 0]


def test_access_faults_name_address_and_window():
    mem, arrays = make_memory()
    with pytest.raises(VpucError, match=r"load of 16 bytes at 0x1f00fff8: outside the mapped part "
                                        r"of WIN_F \(0x1f000000..0x1f00ffff\)"):
        op("vld")(mem, np.uint32(WIN_F + 0xFFF8), np.uint32(0))
    with pytest.raises(VpucError, match=r"store of 4 bytes at 0x1d000000: WIN_D is read-only"):
        op("sw")(mem, np.uint32(1), np.uint32(WIN_D), np.uint32(0))
    with pytest.raises(VpucError, match=r"load of 1 byte at 0x00000010: no window maps this address"):
        op("vlds.b")(mem, np.uint32(16), np.uint32(0), np.uint32(1))
    # batched: the same message as the one-row access of the first faulting row
    with pytest.raises(VpucError, match=r"store of 16 bytes at 0x1f010000: outside the mapped part"):
        op("vst")(mem, np.zeros((2, 16), np.uint8), u32([WIN_F, WIN_F + 0xFFF8]), np.uint32(8))


def test_row_access_paths_agree():
    mem, arrays = make_memory()
    arrays["WIN_F"][:] = RNG.integers(0, 256, arrays["WIN_F"].size, dtype=np.uint8)
    arrays["WIN_E"][:] = RNG.integers(0, 256, arrays["WIN_E"].size, dtype=np.uint8)
    cases = [WIN_F + 48 * np.arange(20), WIN_F + 4000 - 16 * np.arange(20),      # strided view
             WIN_F + 4 * np.arange(20), WIN_F + np.zeros(20, np.int64),          # overlapping
             np.r_[WIN_F + 16 * np.arange(10), WIN_E + 16 * np.arange(10)],      # two windows
             (WIN_F + 7 * np.arange(20) ** 2).reshape(4, 5)]                     # irregular
    for addresses in cases:
        rows = mem.read_rows(addresses, 16)
        singles = np.stack([mem.read(int(a), 16) for a in addresses.reshape(-1)])
        assert np.array_equal(rows.reshape(-1, 16), singles)
        data = RNG.integers(0, 256, addresses.shape + (16,), dtype=np.uint8)
        before = {w: a.copy() for w, a in arrays.items()}
        mem.write_rows(addresses, data)
        batched = {w: a.copy() for w, a in arrays.items()}
        for w in arrays:
            arrays[w][:] = before[w]
        for address, row in zip(addresses.reshape(-1), data.reshape(-1, 16)):
            mem.write(int(address), row)                                # sequential stores
        assert all(np.array_equal(batched[w], arrays[w]) for w in arrays)


def test_scatter_last_write_wins():
    mem, arrays = make_memory()
    mem.scatter(np.array([WIN_F, WIN_F + 1, WIN_F, WIN_F]), np.array([1, 2, 3, 4], np.uint8))
    assert list(arrays["WIN_F"][:2]) == [4, 2]
