"""ONNX BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot (opset 18) and BitShift (opset 11) on
the 8-bit integers the graph holds at run time: uint8 (``u8``) and int8 (``i8``) inputs.

The graph's ops on integers compute in f32 (docs/generator.md: widened, computed, rounded
back), where every integer below 2^24 is exact, so each op is composed bit by bit:

- an operand as its unsigned byte ``u`` (an int8 below 0 plus 256), its bits
  ``b_k = q_k − 2 floor(q_k / 2)`` with ``q_{k+1} = floor(q_k / 2)``, eight rounds;
- And ``Σ 2^k a_k b_k``, Or ``Σ 2^k max(a_k, b_k)``, Xor ``Σ 2^k |a_k − b_k|``; an int8
  result at or above 128 less 256 (two's complement);
- Not ``255 − x`` (uint8), ``−1 − x`` (int8);
- BitShift (ONNX has it for unsigned types only: uint8 here) by ``y``: ``2^y`` picked by
  ``y`` (0 to 7; 8 or more shifts every bit out), left ``(x·2^y) mod 256``, right
  ``floor(x·2^-y)`` (a product by a power of two: exact, where a quotient need not be).

Every step is an integer below 2^16: exact.  int32/int64 tensors are refused naming the
node: their f32 arithmetic is exact only below 2^24.  A constant operand is taken in the
run-time operand's type; operands broadcast as numpy's (ONNX's multidirectional rule).
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.types import ElemType
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_math import f32_constant

BYTE_TYPES = {ElemType.U8: np.uint8, ElemType.I8: np.int8}


def _operands(b: GraphBuilder, node) -> tuple[list[str], ElemType]:
    """The node's operands as graph values of one 8-bit type, and that type."""
    runtime = [n for n in node.input if not b.is_known(n)]
    elem = b.types[b.value(runtime[0])].elem
    if elem not in BYTE_TYPES or any(b.types[b.value(n)].elem is not elem for n in runtime):
        kinds = ", ".join(str(b.types[b.value(n)].elem) for n in runtime)
        raise b.error(f"{node.op_type} of run-time {kinds} tensors; vpuc composes it on uint8 and "
                      "int8 only (its integer arithmetic is f32, exact below 2^24)")
    values = []
    for name in node.input:
        if b.is_known(name):
            values.append(b.constant(np.asarray(b.array(name)).astype(BYTE_TYPES[elem]), f"{node.output[0]}.c"))
        else:
            values.append(b.value(name))
    return values, elem


def _f32(b: GraphBuilder, value: str) -> str:
    return b.op("Convert", [value], {"to": ElemType.F32})


def _unsigned(b: GraphBuilder, x: str, elem: ElemType, const) -> str:
    """The byte's unsigned value in f32: an int8 below 0 plus 256."""
    if elem is ElemType.U8:
        return x
    return b.op("Select", [b.op("Less", [x, const(0.0)]), b.op("Add", [x, const(256.0)]), x])


def _bits(b: GraphBuilder, u: str, const) -> list[str]:
    bits, q = [], u
    for _ in range(8):
        half = b.op("Floor", [b.op("Multiply", [q, const(0.5)])])
        bits.append(b.op("Subtract", [q, b.op("Multiply", [half, const(2.0)])]))
        q = half
    return bits


def _stored(b: GraphBuilder, value: str, elem: ElemType, const, out: str) -> None:
    """An unsigned byte value back to ``elem`` (int8: two's complement), named ``out``."""
    if elem is ElemType.I8:
        value = b.op("Select", [b.op("GreaterEqual", [value, const(128.0)]),
                                b.op("Subtract", [value, const(256.0)]), value])
    b.op("Convert", [value], {"to": elem}, out=out)


def _constants(b: GraphBuilder):
    made: dict[float, str] = {}

    def const(value: float) -> str:
        if value not in made:
            made[value] = f32_constant(b, value, "c")
        return made[value]
    return const


def _binary(combine: str):
    def convert(b: GraphBuilder, node, attrs) -> None:
        (x, y), elem = _operands(b, node)
        const = _constants(b)
        a_bits = _bits(b, _unsigned(b, _f32(b, x), elem, const), const)
        b_bits = _bits(b, _unsigned(b, _f32(b, y), elem, const), const)
        total = None
        for k, (p, q) in enumerate(zip(a_bits, b_bits)):
            if combine == "And":
                bit = b.op("Multiply", [p, q])
            elif combine == "Or":
                bit = b.op("Maximum", [p, q])
            else:
                bit = b.op("Abs", [b.op("Subtract", [p, q])])
            term = bit if k == 0 else b.op("Multiply", [bit, const(float(2 ** k))])
            total = term if total is None else b.op("Add", [total, term])
        _stored(b, total, elem, const, node.output[0])
    return convert


def _not(b: GraphBuilder, node, attrs) -> None:
    (x,), elem = _operands(b, node)
    const = _constants(b)
    top = 255.0 if elem is ElemType.U8 else -1.0
    b.op("Convert", [b.op("Subtract", [const(top), _f32(b, x)])], {"to": elem}, out=node.output[0])


def _bit_shift(b: GraphBuilder, node, attrs) -> None:
    direction = attrs["direction"]
    if direction not in ("LEFT", "RIGHT"):
        raise b.error(f"BitShift direction '{direction}' is not LEFT or RIGHT")
    (x, y), elem = _operands(b, node)
    if elem is not ElemType.U8:
        raise b.error(f"BitShift of {elem} tensors; ONNX defines it for unsigned types (uint8 here)")
    const = _constants(b)
    shift = _f32(b, y)
    sign = 1 if direction == "LEFT" else -1      # right: times 2^-y, exact as any power of two
    factor = const(2.0 ** (8 * sign))            # 8 or more: every bit shifted out
    for k in range(7, -1, -1):
        factor = b.op("Select", [b.op("Equal", [shift, const(float(k))]), const(2.0 ** (k * sign)), factor])
    product = b.op("Multiply", [_f32(b, x), factor])
    if direction == "LEFT":
        wrapped = b.op("Floor", [b.op("Multiply", [product, const(1 / 256)])])
        result = b.op("Subtract", [product, b.op("Multiply", [wrapped, const(256.0)])])
    else:
        result = b.op("Floor", [product])
    b.op("Convert", [result], {"to": elem}, out=node.output[0])


BITWISE_CONVERTERS = {"BitwiseAnd": _binary("And"), "BitwiseOr": _binary("Or"),
                      "BitwiseXor": _binary("Xor"), "BitwiseNot": _not, "BitShift": _bit_shift}
