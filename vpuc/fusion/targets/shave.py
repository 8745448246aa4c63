"""The ACT SHAVE target: our NPU37XX vector cores (docs/shave-isa.md).

Data pointers.  A generated kernel keeps one scalar register per data pointer
(each input, output and scratch buffer), bumped every iteration.  The ISA has
32 scalar registers (``NUM_SREGS``).  Following the derivation OpenVINO uses
for its 32-GPR ARM64 target, we reserve 2 for the work amounts of the two
innermost loops, 1 for the runtime parameters (``s0`` = argsAddr, kept to read
the MemRefData dims of dynamic tensors), 2 for the stack (``sp`` = s30 and the
return address ``lr`` = s31) and 3 temporaries (a scalar to ``vbcast`` from,
the tail count for ``vmask``, address arithmetic): 32 - 8 = 24.  ARM64 gets 23
because it also loses its platform register (x18); SHAVE has none.

Vectors: 32 registers of 128 bits: 8 f16/bf16 lanes, 4 f32/i32 lanes, 16 u8/i8.

Post-ops: the DPU applies a bias and one activation (relu, clamp, sigmoid,
tanh: ``PostOpKind``) to a convolution or matmul result before it leaves the
tile, so those ops are left to the DPU -- but only behind a layer the DPU
lowering takes (``vpuc/fusion/lower_dpu_support.py``: f16/bf16, static shapes,
padding within the window); behind any other layer (an f32 convolution, say)
they stay for the tokenizer.  An Add or Multiply of two activations of one
4-D shape, one of them from the DPU (ResNet's residual Add), is itself left
to the DPU as an eltwise layer, with its activation.  The activations are exactly the keys of
``DPU_ACTIVATIONS``, so every marked op has a task-level ``post`` spelling.

An imported QDQ convolution, ``QConvolution``, is a DPU layer too (``DPU_LAYERS``): a
``layer`` op the tokenizer leaves out, with its relu an attribute (the integer mode
requantizes before any post-op could see a float), so no chain is marked after it.
"""

from __future__ import annotations

from vpuc.fusion.lower_dpu_support import DPU_ACTIVATIONS, DPU_ELTWISE, dpu_eltwise, dpu_problem
from vpuc.fusion.targets import TargetMachine
from vpuc.fusion.targets.mark_skipped import SKIPPED, ChainRule, mark_chain, mark_post_op_chains
from vpuc.ir.graph import Graph
from vpuc.ir.graph_ops import OPS
from vpuc.ir.types import ElemType
from vpuc.shave.isa import NUM_SREGS, NUM_VREGS

DATA_POINTERS = NUM_SREGS - 2 - 1 - 2 - 3

DPU_POST_OPS = ChainRule(backend="DPU", activations=frozenset(DPU_ACTIVATIONS),
                         bias_kinds=frozenset({"Add"}), max_biases=1, max_activations=1,
                         activation_last=True,
                         anchor_ok=lambda op, index: dpu_problem(op, index) is None)


DPU_ELTWISE_POST_OPS = ChainRule(backend="DPU", activations=frozenset(DPU_ACTIVATIONS),
                                 bias_kinds=frozenset(), max_biases=0, max_activations=1,
                                 activation_last=True)


def mark_dpu_post_ops(graph: Graph) -> None:
    """Post-op chains of the DPU's layers, then the Adds and Multiplies the DPU runs as
    eltwise layers (``dpu_eltwise``), each with its activation."""
    mark_post_op_chains(graph, DPU_POST_OPS)
    index = graph.index()
    for op in graph.ops:
        if dpu_eltwise(op, index):
            op.marks[SKIPPED] = DPU_ELTWISE
            mark_chain(graph, index, op, DPU_ELTWISE_POST_OPS)


SHAVE = TargetMachine(
    name="shave",
    summary="ACT SHAVE (NPU37XX): 32 scalar and 32 vector registers of 128 bits",
    data_pointers=DATA_POINTERS,
    vector_registers=NUM_VREGS,
    lanes={ElemType.F16: 8, ElemType.BF16: 8, ElemType.F32: 4, ElemType.I32: 4, ElemType.U8: 16,
           ElemType.I8: 16},
    elem_types=frozenset({ElemType.F16, ElemType.BF16, ElemType.F32, ElemType.I32, ElemType.U8,
                          ElemType.I8}),
    tokenizable=frozenset(n for n, s in OPS.items() if s.elementwise),
    mark_skipped=mark_dpu_post_ops,
    positioned_passes=(("after:convert-power-to-power-static", "mul-add-to-fma"),),
    sources={
        "data_pointers": "32 scalar registers - 2 work amounts - 1 runtime params (s0) - "
                         "2 stack (sp, lr) - 3 temporaries (module docstring)",
        "vector_registers": "vpuc/shave/isa.py NUM_VREGS; 128-bit lanes per docs/shave-isa.md",
        "fma": "the ISA has vfma (a*b+c rounded once)",
    },
)
