"""The numpy references of the library kernels follow the library's contracts, and a
program whose declaration does not (a blob written by something else, a module built
without the verifier) gets a clear error from ``--reference``, never a TypeError."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from runtime_sim.kernel_refs import PARTIAL_OUTPUT, REFERENCES
from runtime_sim.reference import Reference
from tests.sim.simlib import REPO, compile_vir, run_cli
from vpuc.diagnostics import VpucError
from vpuc.ir.module import KernelParam, Ref
from vpuc.ir.tasks import ScalarConst
from vpuc.ir.types import ElemType
from vpuc.kernel_contracts import library_contracts


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_each_reference_takes_the_contracts_inputs_then_scalars(name):
    contract = library_contracts()[name]
    positional = [p for p in inspect.signature(REFERENCES[name]).parameters if p != "axis"]
    scalars = [a for a in contract.args if not a.memref]
    partial = name in PARTIAL_OUTPUT          # it also takes its output as it stands
    assert len(positional) == len(contract.inputs) + partial + len(scalars)


def test_every_library_kernel_with_arguments_has_a_reference():
    assert set(REFERENCES) == {n for n, c in library_contracts().items() if c.args}


def _inputs(program) -> dict[str, np.ndarray]:
    return {b.name: np.ones(b.type.bound_shape, np.float16)
            for b in program.module.buffers if b.kind.value == "input"}


def test_a_declaration_with_an_extra_scalar_is_a_clear_reference_error():
    program = compile_vir(REPO / "examples" / "clamp.vir")
    Reference(program).run(_inputs(program))          # as compiled: fine
    kernel = program.module.kernels[0]
    kernel.params.append(KernelParam("axis", scalar=ElemType.I32))
    task = program.module.task_lists[-1].tasks[0]
    task.consts += (ScalarConst("axis", 3, ElemType.I32),)
    task.run_args += (Ref("axis"),)
    with pytest.raises(VpucError) as info:
        Reference(program).run(_inputs(program))
    assert info.value.diagnostics[0].message == (
        "--reference: clamp calls @builtin_clamp, declared (input: memref<*xf16>, output: "
        "memref<*xf16>, minVal: f16, maxVal: f16, axis: i32) from library \"clamp\", whose "
        "reference follows the library's contract: library \"clamp\": (input: in memref<*xT>, "
        "output: out memref<*xT>, minVal: f16, maxVal: f16); T in {f16, f32}; inputs broadcast "
        "to the output (each dim 1 or the output's, or rank 0)")


def test_run_reference_of_an_extra_scalar_stops_at_the_declaration(capsys, monkeypatch):
    code, out, err = run_cli(["run", "tests/golden/errors/library_extra_scalar.vir",
                              "--reference"], capsys, monkeypatch)
    assert code == 1 and out == ""
    assert "internal error" not in err and "Traceback" not in err
    assert err.startswith("tests/golden/errors/library_extra_scalar.vir:4:62: error: kernel "
                          "@softmax declares 3 arguments, but library kernel \"softmax\" takes 2")
