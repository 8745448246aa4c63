"""Verifier rules of the DPU's integer mode (``quant scale(%s) zero_point(zx, zy)``).

NPU37XX's integer datapath (docs/vir.md, "The DPU's integer mode"): u8 or i8 activations,
i8 weights, an i32 bias, and a PPE that requantizes each output channel by a fixed-point
(mult, shift) to u8/i8 or scales the int32 sum by an f32 to f16.  Each operand's type is
checked against that, and each error points at the operand (or the clause) and says
what was expected.
"""

from __future__ import annotations

from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.tasks import DpuOp, DpuTask, PostOpKind
from vpuc.ir.types import ElemType

QUANT_OPS = (DpuOp.CONV, DpuOp.DWCONV, DpuOp.MATMUL)
ACTIVATIONS = (ElemType.U8, ElemType.I8)
INTEGER_OUTPUTS = (ElemType.U8, ElemType.I8)
OUTPUTS = INTEGER_OUTPUTS + (ElemType.F16,)
# The PPE's ppe_scale register fields (npu_plugin, NPU37XX DPUInvariantRegisters.ppe_scale:
# ppe_scale_mult a signed 16-bit field, ppe_scale_shift 6 bits).
MULT_RANGE = (-(1 << 15), (1 << 15) - 1)
SHIFT_RANGE = (0, 63)
ELEM_RANGE = {ElemType.U8: (0, 255), ElemType.I8: (-128, 127)}


def _names(elems) -> str:
    return " or ".join(map(str, elems))


def check_quant(task: DpuTask, regions: dict, bag: DiagnosticBag) -> None:
    """The operand types and zero points of a task in the integer mode; ``regions`` by
    role as ``check_dpu_task`` resolved them (all present)."""
    quant = task.quant
    if task.op not in QUANT_OPS:
        bag.error(quant.loc, f"dpu {task.op} has no integer mode; 'quant' applies to "
                  f"{', '.join(map(str, QUANT_OPS))}")
        return
    x = regions["in0"].type.elem
    out = regions["dpu output"].type.elem
    if x not in ACTIVATIONS:
        bag.error(task.inputs[0].loc, f"dpu input %{task.inputs[0]} of an integer {task.op} "
                  f"is {x}; expected {_names(ACTIVATIONS)}")
    weights = regions.get("dpu weights")
    if weights is not None and weights.type.elem is not ElemType.I8:
        bag.error(task.weights.loc, f"dpu weights %{task.weights} of an integer {task.op} are "
                  f"{weights.type.elem}; expected i8")
    bias = regions.get("dpu bias")
    if bias is not None and bias.type.elem is not ElemType.I32:
        bag.error(task.bias.loc, f"dpu bias %{task.bias} of an integer {task.op} is "
                  f"{bias.type.elem}; expected i32 (the int32 sum's bias, the input zero "
                  "point folded in)")
    if out not in OUTPUTS:
        bag.error(task.output.loc, f"dpu output %{task.output} of an integer {task.op} is "
                  f"{out}; expected {_names(INTEGER_OUTPUTS)} (requantized) or f16 (dequantized)")
        return
    if x in ELEM_RANGE:
        _zero_point(quant.in_zero_point, x, "input", quant, bag)
    if out in INTEGER_OUTPUTS:
        _zero_point(quant.out_zero_point, out, "output", quant, bag)
    elif quant.out_zero_point != 0:
        bag.error(quant.loc, f"output zero point {quant.out_zero_point} on the f16 output "
                  f"%{task.output}; expected 0 (a dequantized output has none)")
    _check_scale(task, regions, out, bag)
    _check_post(task, out, bag)


def _zero_point(value: int, elem: ElemType, which: str, quant, bag: DiagnosticBag) -> None:
    low, high = ELEM_RANGE[elem]
    if not low <= value <= high:
        bag.error(quant.loc, f"{which} zero point {value} is outside {elem}'s range "
                  f"[{low}, {high}]")


def _check_scale(task: DpuTask, regions: dict, out: ElemType, bag: DiagnosticBag) -> None:
    scale = regions["dpu scale"].type
    ref = task.quant.scale
    channels = regions["dpu output"].type.bound_shape[1]
    if out in INTEGER_OUTPUTS:
        want, elem = (channels, 2), ElemType.I32
        what = "one (mult, shift) row per output channel"
    else:
        want, elem = (channels,), ElemType.F32
        what = "one dequantization scale per output channel"
    if scale.elem is not elem or tuple(scale.bound_shape) != want:
        got = "x".join(map(str, (*scale.bound_shape, scale.elem)))
        expected = "x".join(map(str, (*want, elem)))
        bag.error(ref.loc, f"dpu scale %{ref} is {got}; expected {expected}, {what} of the "
                  f"{out} output")


def _check_post(task: DpuTask, out: ElemType, bag: DiagnosticBag) -> None:
    post = task.post
    if post is None:
        return
    if post.kind not in (PostOpKind.RELU, PostOpKind.CLAMP):
        bag.error(post.loc, f"post {post.kind} on an integer {task.op}; the integer PPE "
                  "applies relu or clamp")
        return
    if post.kind is PostOpKind.CLAMP and out in INTEGER_OUTPUTS:
        low, high = ELEM_RANGE[out]
        if not all(float(p).is_integer() and low <= p <= high for p in post.params):
            bag.error(post.loc, f"post clamp on the {out} output takes integers in "
                      f"[{low}, {high}] (the stored values); got "
                      f"({', '.join(map(str, post.params))})")
