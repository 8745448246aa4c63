"""OpenVINO's CPU plugin on x64, so our tokenization can be compared with OpenVINO's.

Numbers from the CPU plugin's transformation pipeline: "X64 has 16 gprs. After
excluding 2 registers for work amounts, 1 register for runtime parameters, and
2 stack related registers, it has 11 remaining registers" (data_ptr_gpr_count
= 11).  AVX2: 16 vector registers (ymm) of 8 f32 lanes.

Post-ops follow ``SnippetsMarkSkipped``: oneDNN fuses a chain of activations and
per-channel scale/shift ops into a convolution or matmul, so those are skipped.
"""

from __future__ import annotations

from vpuc.fusion.targets import TargetMachine
from vpuc.fusion.targets.mark_skipped import ChainRule, mark_post_op_chains
from vpuc.ir.graph import Graph
from vpuc.ir.graph_ops import OPS
from vpuc.ir.types import ElemType

ONEDNN_POST_OPS = ChainRule(
    backend="oneDNN",
    activations=frozenset({"Relu", "Elu", "Sigmoid", "Clamp", "Swish", "HSwish", "Tanh", "Gelu",
                           "Abs", "Sqrt"}),
    bias_kinds=frozenset({"Add", "Multiply", "Subtract", "Divide"}),
    max_biases=8, max_activations=8, activation_last=False)


def mark_onednn_post_ops(graph: Graph) -> None:
    mark_post_op_chains(graph, ONEDNN_POST_OPS)


X64 = TargetMachine(
    name="x64",
    summary="OpenVINO CPU plugin, x64 AVX2: 16 GPRs, 16 vector registers of 8 f32 lanes",
    data_pointers=11,
    vector_registers=16,
    lanes={ElemType.F32: 8, ElemType.I32: 8, ElemType.BF16: 16, ElemType.F16: 16, ElemType.U8: 32},
    elem_types=frozenset({ElemType.F32, ElemType.BF16, ElemType.F16, ElemType.I32, ElemType.I8,
                          ElemType.U8}),
    tokenizable=frozenset(n for n, s in OPS.items() if s.elementwise),
    mark_skipped=mark_onednn_post_ops,
    positioned_passes=(("after:convert-power-to-power-static", "mul-add-to-fma"),),
    sources={"data_pointers": "OpenVINO intel_cpu transformation_pipeline.cpp: data_ptr_gpr_count = 11",
             "vector_registers": "AVX2 ymm0..ymm15, 8 x f32"},
)
