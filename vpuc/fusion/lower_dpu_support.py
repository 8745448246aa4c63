"""What the DPU lowering supports: one answer for the marking pass and for lower-graph.

``dpu_problem(op, index)`` says why a graph layer (``DPU_LAYERS``; the CNN
layers of ``lower_dpu_nn`` answer through its ``nn_problem``) cannot become
task-level DPU tasks, or None when it can; the ACT
SHAVE target's marking pass (``targets/shave.py``) only hides post-ops behind
a layer the DPU lowering takes, and ``lower_dpu`` reports the same sentence
when it meets a layer it cannot take.  ``DPU_ACTIVATIONS`` maps the graph ops
the DPU applies as a post-op activation to the task-level ``post`` syntax
(``PostOpKind``); the marking pass marks exactly these (and one bias ``Add``
with a per-channel constant), so everything it marks has a DPU spelling.
``dpu_eltwise`` says which Add/Multiply of two activations the DPU runs as an
eltwise layer; the marking pass marks those with ``DPU_ELTWISE``.

The rules, from the task-level IR (``docs/vir.md``, DPU tasks) and its
simulator (``runtime_sim/dpu``):

- element types: the DPU computes on f16, bf16, u8, i8 and has no f32.  A
  Convolution or MatMul is lowered for f16 and bf16 only: integer layers would
  need the quantization scales the graph does not carry.  MaxPool takes all
  four (a max is exact);
- shapes are static (DPU tasks and variants have no run-time dims);
- padding: every window must hold a real input cell (the DPU pools never pick
  a padded cell, and a row block must load at least one row), so each pad is
  at most the dilated kernel extent minus one.
"""

from __future__ import annotations

import numpy as np

from vpuc import const_files
from vpuc.fusion.targets.mark_skipped import SKIPPED
from vpuc.ir.graph import CONSTANT, GraphIndex, GraphOp
from vpuc.ir.module import format_number
from vpuc.ir.tasks import PostOpKind
from vpuc.ir.types import ElemType

DPU_LAYERS = ("Convolution", "MatMul", "MaxPool", "GroupConvolution", "AvgPool", "ReduceMean",
              "ReduceMax", "ConvolutionBackpropData", "GroupConvolutionBackpropData",
              "QConvolution")
DPU_FLOATS = (ElemType.F16, ElemType.BF16)
POOL_ELEMS = (ElemType.F16, ElemType.BF16, ElemType.U8, ElemType.I8)

# graph op kind -> the task-level post-op that applies it (after the bias)
DPU_ACTIVATIONS = {"Relu": PostOpKind.RELU, "Clamp": PostOpKind.CLAMP,
                   "Sigmoid": PostOpKind.SIGMOID, "Tanh": PostOpKind.TANH}


# the mark of an Add or Multiply the DPU runs as an eltwise layer (``dpu_eltwise``)
DPU_ELTWISE = "the DPU runs it as an eltwise layer (two activations of one shape)"


def dpu_eltwise(op: GraphOp, index: GraphIndex) -> bool:
    """An Add or Multiply of two rank-4 f16/bf16 activations of the op's own shape (the DPU's
    eltwise takes two inputs of one shape, no broadcast), one of them already coming from
    the DPU (a layer or its post-op chain), as ResNet's residual Add does: it then runs
    on the DPU instead of a one-op ACT SHAVE kernel of its own."""
    if op.kind not in ("Add", "Multiply") or SKIPPED in op.marks or len(op.operands) != 2:
        return False
    producers = [index.producer(o) for o in op.operands]
    if any(p.kind == CONSTANT or p.type != op.type for p in producers):
        return False
    if op.type.rank != 4 or not op.type.is_static or op.type.elem not in DPU_FLOATS:
        return False
    return any(SKIPPED in p.marks or (p.kind in DPU_LAYERS and dpu_problem(p, index) is None)
               for p in producers)


def eltwise_anchor(op: GraphOp) -> bool:
    """Whether ``op`` was marked as a DPU eltwise layer (not as a post-op of another)."""
    return op.marks.get(SKIPPED) == DPU_ELTWISE


def post_op_text(op: GraphOp) -> str:
    """The ``post ...`` clause that applies the activation ``op``."""
    kind = DPU_ACTIVATIONS[op.kind]
    if kind is PostOpKind.CLAMP:
        return f"post clamp({format_number(op.attrs['min'])}, {format_number(op.attrs['max'])})"
    return f"post {kind}"


def window(op: GraphOp, index: GraphIndex):
    """(kernel, strides, pads_begin, pads_end, dilations) of a Convolution or MaxPool."""
    if op.kind == "Convolution":
        kernel = tuple(index.producer(op.operands[1]).type.dims[2:])
        dilations = tuple(op.attrs["dilations"])
    else:
        kernel, dilations = tuple(op.attrs["kernel"]), (1, 1)
    return (kernel, tuple(op.attrs["strides"]), tuple(op.attrs["pads_begin"]),
            tuple(op.attrs["pads_end"]), dilations)


def dpu_problem(op: GraphOp, index: GraphIndex) -> str | None:
    """Why ``op`` (a Convolution, MatMul or MaxPool) cannot run as DPU tasks; None if it can."""
    types = [index.producer(o).type for o in op.operands] + [op.type]
    if not all(t.is_static for t in types):
        return "it has run-time dims, and DPU tasks have static shapes"
    if op.kind in ("Add", "Multiply"):
        return None if eltwise_anchor(op) else "it is not marked as a DPU eltwise layer"
    if op.kind == "QConvolution":
        from vpuc.fusion.lower_dpu_quant import qconv_problem
        return qconv_problem(op, index)
    if op.kind not in ("Convolution", "MatMul", "MaxPool"):
        from vpuc.fusion.lower_dpu_nn_plan import nn_problem
        return nn_problem(op, index)
    elem = op.type.elem
    allowed = POOL_ELEMS if op.kind == "MaxPool" else DPU_FLOATS
    if elem not in allowed:
        names = [str(e) for e in allowed]
        why = (f"it is {elem}; the DPU lowering takes {op.kind} on "
               + ", ".join(names[:-1]) + " or " + names[-1])
        if elem is ElemType.F32 or elem is ElemType.F64:
            return why + f" (the DPU has no {elem}: insert a Convert)"
        if not elem.is_float:
            return why + " (an integer layer needs quantization scales the graph does not carry)"
        return why
    if op.kind == "MatMul":
        return None
    kernel, _, begin, end, dilations = window(op, index)
    pooled = types[0].dims if op.kind == "MaxPool" else ()     # a global pool goes in levels
    return kernel_problem(kernel, begin + end, pooled) \
        or padding_problem(kernel, begin, end, dilations)


def kernel_problem(kernel, pads=(), dims=()) -> str | None:
    """A kernel side beyond the NCE's (``verifier/dpu.py``, ``MAX_KERNEL``), but a pool's
    window over all of an unpadded input (``dims`` NCHW): a global pool, which the
    lowering splits into levels (``lower_dpu_pool_levels``, ``lower_dpu_global_pool``)."""
    from vpuc.verifier.dpu import MAX_KERNEL
    whole = len(dims) == 4 and tuple(kernel) == tuple(dims[2:]) and not any(pads)
    if max(kernel) > MAX_KERNEL and not whole:
        return (f"its kernel {tuple(kernel)} is beyond the NCE's {MAX_KERNEL} x {MAX_KERNEL} "
                "window; splitting it into smaller ones (the NPU compiler's HandleLargeKernels, "
                "vpuc/fusion/large_kernels.py) is supported for global pools, MaxPool, and "
                "AveragePool whose sides beyond it are a * b (a, b <= 11) with a dividing the "
                "stride (or one output) and no padding on them; not for convolutions")
    return None


def padding_problem(kernel, begin, end, dilations) -> str | None:
    """Padding wider than the dilated kernel reaches: a window of padding only."""
    for axis, name in ((0, "height"), (1, "width")):
        extent = dilations[axis] * (kernel[axis] - 1)
        if max(begin[axis], end[axis]) > extent:
            return (f"its {name} padding ({begin[axis]}, {end[axis]}) is wider than the kernel "
                    f"window can reach ({extent}); a window of padding only has no DPU form")
    return None


INLINE_LIMIT = 16          # longer computed constants are in-memory files (const_text)


def const_text(values: np.ndarray, hint: str = "c") -> str:
    """The initializer of a const the lowering computed: a literal when short, else an
    in-memory file (``vpuc/const_files.py``) with the values' shape, never a long literal."""
    if values.size <= INLINE_LIMIT:
        return "[" + ", ".join(repr(float(v)) for v in values.ravel()) + "]"
    return f'file "{const_files.hold(np.asarray(values), hint)}"'
