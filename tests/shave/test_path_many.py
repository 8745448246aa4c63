"""Several invocations' path batches of one library kernel run as one batch of all their
rows (``path_many``): the layer norm's and softmax's per-row loops of invocations in
step (``invoke.invoke_together``) give each invocation's memory, registers, counts and
cycles as it alone gives them; walks of another path run alone; a fault is the faulting
invocation's own."""

from __future__ import annotations

import numpy as np
import pytest

import runtime_sim.isa.path_many as path_many
from runtime_sim.isa.invoke import invoke_kernel, invoke_together
from shave_testlib import WIN_F
from test_together import FIELDS
from vpuc.abi.params import MemRefArg, ScalarArg, layout_window_e
from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.ir.types import ElemType
from vpuc.kernel_library import load_library_kernel

WIN_E = load_arch().window_bases["WIN_E"]
CMX = 1 << 17
SCALARS = {"mvn": [ScalarArg(ElemType.F32, 1e-5), ScalarArg(ElemType.I32, 0)],
           "softmax": []}


def _memref(offset: int, shape: tuple[int, int]) -> MemRefArg:
    return MemRefArg(WIN_F + offset, ElemType.F16, shape, (0, 1), (shape[1] * 16, 16))


def _calls(name: str, blocks: list[tuple[int, int, int, int]], cmx: np.ndarray,
           scalars: list | None = None) -> list[dict]:
    """One call per (input offset, output offset, rows, width) block, f16 rows;
    ``scalars``: each call's own scalar arguments."""
    obj = load_library_kernel(name)
    calls = []
    for i, (src, dst, rows, width) in enumerate(blocks):
        image = layout_window_e(obj.data, [_memref(src, (rows, width)), _memref(dst, (rows, width)),
                                           *(scalars[i] if scalars else SCALARS[name])], WIN_E)
        calls.append(dict(obj=obj, cmx=cmx, window_e=bytes(image.image),
                          args_offset=image.args_offset, args_size=image.args_size))
    return calls


def _filled(seed: int) -> np.ndarray:
    """CMX of f16 values, each block's rows with its own scale and offset."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0, 1, CMX // 2) * rng.uniform(0.1, 8, CMX // 2 // 64).repeat(64)
    return values.astype(np.float16).view(np.uint8).copy()


@pytest.fixture
def groups(monkeypatch) -> list[int]:
    """The number of invocations of each path batch run as one."""
    sizes = []
    real = path_many.execute_many

    def spy(walks, Rs, memories, counts):
        sizes.append(len(walks))
        return real(walks, Rs, memories, counts)
    monkeypatch.setattr(path_many, "execute_many", spy)
    return sizes


def together_and_alone(name: str, blocks: list, seed: int, scalars: list | None = None) -> list:
    cmx = _filled(seed)
    alone_cmx, together_cmx = cmx.copy(), cmx.copy()
    alone = [invoke_kernel(**call) for call in _calls(name, blocks, alone_cmx, scalars)]
    loops: list = []
    together = invoke_together(_calls(name, blocks, together_cmx, scalars), loops)
    for one, other in zip(alone, together):
        assert one.scalar_regs[0] == 0
        assert one.batched_iterations > 0
        for field in FIELDS:
            assert getattr(other, field) == getattr(one, field), field
    assert np.array_equal(together_cmx, alone_cmx)
    assert not np.array_equal(alone_cmx, cmx)
    return loops


def _blocks(count: int, rows: int, width: int) -> list[tuple[int, int, int, int]]:
    size = rows * width * 2 + 64            # blocks apart, not all on one alignment
    return [(i * 2 * size, i * 2 * size + size, rows, width) for i in range(count)]


@pytest.mark.parametrize("name", ["mvn", "softmax"])
@pytest.mark.parametrize("count, rows, width", [(2, 6, 192), (4, 9, 192), (3, 5, 100)])
def test_row_loops_of_several_invocations_run_as_one(name, count, rows, width, groups):
    """A layer norm's three passes (inner loops as rows x copies) and a softmax's, over
    invocations of differing data: the encoder's row length, and one with a tail."""
    loops = together_and_alone(name, _blocks(count, rows, width), seed=rows + count)
    assert groups == [count]
    assert all(fast.together >= 1 for fast in loops)


def test_registers_that_differ_are_each_invocations_own(groups):
    """eps (a vector the rows read from the loop head) differs between the invocations:
    each row takes its own invocation's, as alone (eps_outside in the last)."""
    scalars = [[ScalarArg(ElemType.F32, eps), ScalarArg(ElemType.I32, outside)]
               for eps, outside in ((1e-5, 0), (0.5, 0), (2.0, 0), (0.25, 1))]
    together_and_alone("mvn", _blocks(4, 6, 192), seed=5, scalars=scalars)
    assert groups == [4]


@pytest.mark.parametrize("name", ["mvn", "softmax"])
def test_other_paths_run_alone(name, groups):
    """Rows of another length walk another path: that invocation's batch runs alone, the
    others' as one."""
    blocks = _blocks(4, 6, 192)
    src, dst, rows, _ = blocks[1]
    blocks[1] = (src, dst, rows, 136)
    together_and_alone(name, blocks, seed=7)
    assert groups == [3]


def test_more_rows_than_a_chunk_split_the_group(groups, monkeypatch):
    monkeypatch.setattr(path_many, "PATH_CHUNK", 20)
    together_and_alone("mvn", _blocks(5, 8, 64), seed=3)
    assert groups == [2, 2]             # 8 + 8 rows, then 8 + 8, then the fifth alone


def test_a_fault_in_the_third_of_four_names_it():
    """The third invocation's output runs past the end of CMX at its row 5: its path
    batch stops before it, the interpreter faults there, and the error is its own."""
    rows, width = 8, 192
    blocks = _blocks(4, rows, width)
    src, _, _, _ = blocks[2]
    blocks[2] = (src, CMX - 5 * width * 2 - 32, rows, width)
    cmx = _filled(11)
    with pytest.raises(VpucError) as alone:
        invoke_kernel(**_calls("mvn", blocks[2:3], cmx.copy())[0])
    with pytest.raises(VpucError) as together:
        invoke_together(_calls("mvn", blocks, cmx.copy()))
    assert together.value.together_index == 2
    assert str(together.value) == str(alone.value)
    assert "outside the mapped part of WIN_F" in str(alone.value)
