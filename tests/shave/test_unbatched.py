"""The interpreter's one-vector forms (``runtime_sim/isa/unbatched.py``) against
the general semantics: the same bits on random and special patterns (NaNs of
both kinds and signs, infinities, zeros, subnormals, values that overflow f16)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.isa.memory import WindowMemory
from runtime_sim.isa.sem_memory import MEMORY_OPS
from runtime_sim.isa.sem_vector import GENERAL, VECTOR_OPS
from runtime_sim.isa.unbatched import MEMORY, OPS

SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFD55,
               0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x4900]
SPECIAL_F32 = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000, 0xFF800000,
               0x7FC00000, 0xFFC00001, 0x7F800001, 0x3F800000, 0x477FE000, 0x47800000,
               0xC7800000, 0x7F7FFFFF, 0x33800000, 0x387FC000]


def vectors(seed: int, count: int = 300) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 256, 16, dtype=np.uint8) for _ in range(count // 3)]
    out += [(rng.standard_normal(4) * 10.0 ** rng.integers(-8, 8)).astype(np.float32)
            .view(np.uint8).copy() for _ in range(count // 3)]
    out += [(rng.standard_normal(8) * 10.0 ** rng.integers(-4, 4)).astype(np.float16)
            .view(np.uint8).copy() for _ in range(count // 3)]
    out += [np.array(rng.choice(SPECIAL_F16, 8), np.uint16).view(np.uint8) for _ in range(40)]
    out += [np.array(rng.choice(SPECIAL_F32, 4), np.uint32).view(np.uint8) for _ in range(40)]
    return out


@pytest.mark.parametrize("name", sorted(OPS))
def test_vector_op_is_the_general_semantics(name):
    general, fast = VECTOR_OPS[name], OPS[name]
    arity = general.__code__.co_argcount - len(general.__defaults__ or ())
    values = vectors(len(name))
    rng = np.random.default_rng(7)
    if name.startswith("vbcast."):          # a scalar register's value: any uint32
        values = [np.uint32(x) for x in rng.integers(0, 1 << 32, 200, dtype=np.uint64)]
        values += [np.uint32(x) for x in (0, 1, 0xFF, 0x100, 0xFFFF, 0x10000, 0xFFFFFFFF)]
    with np.errstate(all="ignore"):
        for i in range(len(values)):
            args = [values[i]] + [values[j] for j in rng.integers(0, len(values), arity - 1)]
            expected, got = general(*args), fast(*args)
            assert got.dtype == np.uint8 and got.shape == (16,), name
            assert bytes(got) == bytes(np.asarray(expected, np.uint8)), (name, args)


def _memory() -> tuple[WindowMemory, np.ndarray]:
    cmx = np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8)
    return WindowMemory({"WIN_F": cmx}), cmx


@pytest.mark.parametrize("name", sorted(MEMORY))
def test_memory_op_is_the_general_semantics(name):
    kind, general = MEMORY_OPS[name]
    fast = MEMORY[name]
    probe, _ = _memory()
    base = probe.base("WIN_F")
    rng = np.random.default_rng(11)
    for value in vectors(5, 30):
        address, offset = np.uint32(base + int(rng.integers(0, 4000 // 16)) * 16), np.uint32(
            int(rng.integers(0, 4)) * 4)
        results = []
        for fn in (general, fast):
            memory, cmx = _memory()
            if kind == "load":
                results.append((np.asarray(fn(memory, address, offset)).tobytes(), cmx.tobytes()))
            else:
                stored = value if name == "vst" else value.view(np.uint32)[0]
                fn(memory, stored, address, offset)
                results.append(cmx.tobytes())
        assert results[0] == results[1], name


def test_mask_registers_are_reported_as_their_bits():
    from runtime_sim.isa import load_kernel, run
    from shave_testlib import make_memory
    from vpuc.shave import assemble

    source = "\n".join(["    .global k", "k:", "    li s1, 0xA5C3", "    mset m1, s1",
                        "    li s2, 0x8001", "    mset m7, s2", "    halt"])
    memory, _ = make_memory()
    loaded = load_kernel(assemble(source, "m.s"), memory)
    result = run(loaded.program, memory, entry=loaded.entry())
    assert result.mask_regs == [0, 0xA5C3, 0, 0, 0, 0, 0, 0x8001]


def _batch(values: list[np.ndarray], rng, rows: int) -> np.ndarray:
    return np.stack([values[i] for i in rng.integers(0, len(values), rows)])


@pytest.mark.parametrize("name", sorted(GENERAL))
def test_batch_form_is_the_general_semantics(name):
    """``sem_vector``'s batch forms against the general ones on whole batches: contiguous,
    rows apart (a view of every other row), lanes reversed (``view`` refuses: the general
    form runs), mixed shapes (the general form runs), one vector."""
    general, batched = GENERAL[name], VECTOR_OPS[name]
    arity = general.__code__.co_argcount
    values = vectors(len(name) + 1)
    rng = np.random.default_rng(13)
    with np.errstate(all="ignore"):
        for rows in (1, 7, 300, 600):
            batches = [_batch(values, rng, rows) for _ in range(arity)]
            spread = [np.repeat(b, 2, axis=0)[::2] for b in batches]
            layouts = [batches, spread, [b[:, ::-1] for b in batches],
                       [batches[0][0]] + batches[1:], [b[0] for b in batches]]
            for args in layouts:
                expected = np.asarray(general(*args), np.uint8)
                got = batched(*args)
                assert got.dtype == np.uint8 and got.shape == expected.shape, name
                assert got.tobytes() == expected.tobytes(), (name, rows)
