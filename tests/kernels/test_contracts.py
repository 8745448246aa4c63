"""kernels/contracts.toml tells the truth about the kernels: every library kernel has a
contract; its argument count, params struct size, scalar offsets and axis kind agree
with the kernel's assembly and with docs/kernels.md; and the element types it allows
are exactly those the kernel runs with (status 0), every other combination being
rejected by the kernel itself (status 1)."""

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from kernel_harness import Tensor, run
from vpuc.abi.params import ScalarArg
from vpuc.diagnostics import VpucError
from vpuc.ir.module import Direction
from vpuc.ir.types import ELEM_BY_NAME
from vpuc.kernel_contracts import library_contracts
from vpuc.kernel_library import library_names, library_source
from vpuc.verifier.wiring import Operand, shape_problems

E_TYPE = 1
DOC = (Path(__file__).resolve().parents[2] / "docs" / "kernels.md").read_text()
# element types the harness can place: floats and a 2- and a 4-byte integer
CANDIDATES = {"f16": np.float16, "f32": np.float32, "i16": np.int16, "i32": np.int32}
EQU = re.compile(r"^\s*\.equ\s+(NUM_IN|NUM_OUT|AXIS_KIND|SCALARS),\s*(\d+)", re.MULTILINE)
HEADER_BYTES = re.compile(r"^//\s+params:.*?(\d+) bytes", re.MULTILINE)
HEADER_CONTRACT = re.compile(r"^//\s+contract:\s+([a-z_]+)\(([^)]*)\)", re.MULTILINE)
SCALAR_LOAD = re.compile(r"^\s*(lhu|lh|lw|lbu|lb)\s+s\d+,\s*SCALARS(?:\s*\+\s*(\d+))?\(s17\)",
                         re.MULTILINE)
LOAD_BYTES = {"lb": 1, "lbu": 1, "lh": 2, "lhu": 2, "lw": 4}


def test_every_library_kernel_has_one_contract():
    assert set(library_contracts()) == set(library_names())


@pytest.mark.parametrize("name", library_names())
def test_contract_matches_the_assembly(name):
    contract = library_contracts()[name]
    source = library_source(name).read_text()
    # the header comment's signature: the same names in the same order
    header_name, header_args = HEADER_CONTRACT.search(source).groups()
    assert header_name == name
    names = [part.split(":")[0].strip() for part in header_args.split(",") if part.strip()]
    assert names == [a.name for a in contract.args]
    if name == "runtime":
        assert contract.args == ()
        return
    equ = {key: int(value) for key, value in EQU.findall(source)}
    # the driver reads NUM_IN input MemRefData, then the output's (NUM_OUT of them: topk)
    directions = [a.direction for a in contract.memrefs]
    assert directions == [Direction.IN] * equ["NUM_IN"] + [Direction.OUT] * equ.get("NUM_OUT", 1)
    assert equ["AXIS_KIND"] == contract.axis
    assert int(HEADER_BYTES.search(source).group(1)) == contract.params_bytes
    # scalars: the kernel's loads cover exactly the contract's packed scalars
    loads = {(int(offset or 0), LOAD_BYTES[op]) for op, offset in SCALAR_LOAD.findall(source)}
    scalars, offset = set(), 0
    for arg in contract.args:
        if not arg.memref:
            scalars.add((offset, ELEM_BY_NAME[arg.elem].nbytes))
            offset += ELEM_BY_NAME[arg.elem].nbytes
    assert loads == scalars
    if scalars:
        assert equ["SCALARS"] == 32 * len(contract.memrefs)


def _documented_bytes() -> dict[str, int]:
    table = DOC.split("## The kernels", 1)[1]
    sizes = {}
    for names, size in re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)*) \|.*?\| (\d+) B \|", table,
                                  re.MULTILINE):
        for kernel in names.split(", "):
            sizes[kernel.strip("`")] = int(size)
    return sizes


def test_docs_give_the_contracts_params_sizes():
    assert _documented_bytes() == {n: c.params_bytes for n, c in library_contracts().items()}


def _allowed(contract, elems) -> bool:
    """The contract's type rule for memref element types ``elems`` (in memref order)."""
    binding = {}
    for arg, elem in zip(contract.memrefs, elems):
        if ELEM_BY_NAME[elem] not in contract.types[arg.elem]:
            return False
        if binding.setdefault(arg.elem, elem) != elem:
            return False
    return True


def _cases():
    for name, contract in sorted(library_contracts().items()):
        # gather's and topk's: test_kernels_gather, test_kernels_topk
        if contract.memrefs and contract.shapes not in ("gather", "topk"):
            for elems in itertools.product(CANDIDATES, repeat=len(contract.memrefs)):
                yield name, elems


@pytest.mark.parametrize("name, elems", list(_cases()),
                         ids=[f"{n}-{'-'.join(e)}" for n, e in _cases()])
def test_kernel_accepts_exactly_the_contracts_types(name, elems):
    contract = library_contracts()[name]
    shape = (2, 3)
    out_shape = (2, 1) if contract.shapes == "reduce" else shape
    shapes = [shape] * (len(elems) - 1) + [out_shape]
    *inputs, output = [np.ones(s, CANDIDATES[e]) for s, e in zip(shapes, elems)]
    scalars = [ScalarArg(ELEM_BY_NAME[a.elem], 0.0) for a in contract.args if not a.memref]
    status = 0 if _allowed(contract, elems) else E_TYPE
    result = run(name, [Tensor(x) for x in inputs], Tensor(np.zeros_like(output)), scalars,
                 expect_status=status)
    assert result.status == status


def test_a_malformed_contract_file_is_a_located_error(tmp_path, monkeypatch):
    import vpuc.kernel_contracts as contracts
    bad = tmp_path / "contracts.toml"
    bad.write_text('[relu]\nargs = [{ name = "input", kind = "memref", elem = "T" }]\n'
                   'types = { T = ["f16"] }\nshapes = "broadcast"\n')
    monkeypatch.setattr(contracts, "CONTRACTS_PATH", bad)
    contracts.library_contracts.cache_clear()
    try:
        with pytest.raises(VpucError) as info:
            contracts.library_contracts()
        assert info.value.diagnostics[0].message == (
            f"{bad}: [relu]: memref 'input' has direction None; expected in, out or inout")
    finally:
        contracts.library_contracts.cache_clear()


# (input shape, output shape): every broadcasting case the driver distinguishes
SHAPE_CASES = [((2, 3), (2, 3)), ((1, 3), (2, 3)), ((2, 1), (2, 3)), ((), (2, 3)),
               ((3, 3), (2, 3)), ((3,), (2, 3)), ((2, 3), (2, 1)), ((1, 3), (2, 1)),
               ((2, 1), (2, 1)), ((), (2, 1)), ((2, 3), (1, 1)), ((2, 3, 1), (2, 3))]
E_SHAPE = 2


@pytest.mark.parametrize("name", [n for n, c in sorted(library_contracts().items())
                                  if c.args and c.shapes not in ("gather", "topk")])
def test_shape_rule_matches_the_kernel(name):
    """Where the contract's shape rule allows a case the kernel runs it; where it does not,
    the kernel rejects it too, except softmax, whose contract is stricter (see contracts.toml)."""
    contract = library_contracts()[name]
    elem = np.float32 if name == "copy" else np.float16
    scalars = [ScalarArg(ELEM_BY_NAME[a.elem], 0.0) for a in contract.args if not a.memref]
    for shape, out_shape in SHAPE_CASES:
        inputs = [np.ones(shape, elem)] + [np.ones(out_shape, elem)] * (len(contract.inputs) - 1)
        operands = [Operand(None, f"input {i}", x.shape) for i, x in enumerate(inputs)]
        allowed = not list(shape_problems(contract.shapes, operands,
                                          Operand(None, "output", out_shape)))
        if not allowed and contract.shapes == "same":
            continue
        status = 0 if allowed else E_SHAPE
        run(name, [Tensor(x) for x in inputs], Tensor(np.zeros(out_shape, elem)), scalars,
            expect_status=status)
