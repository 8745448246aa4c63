"""OpenVINO's CPU plugin on x64, so our tokenization can be compared with OpenVINO's.

Every rule below is the CPU plugin's, cited by file and function of OpenVINO's
source (``src/plugins/intel_cpu/src/transformations/...`` and
``src/common/snippets/src/pass/...``); rules about things our graph dialect
cannot express are listed at the end, so the list is complete.

Machine.  ``transformation_pipeline.cpp``, ``Transformations::MainSnippets``:
"X64 has 16 gprs. After excluding 2 registers for work amounts, 1 register for
runtime parameters, and 2 stack related registers, it has 11 remaining
registers" (``data_ptr_gpr_count = 11``).  AVX2: 16 ymm registers of 8 f32 lanes.

Marking (``snippets/x64/pass/snippets_mark_skipped.cpp``,
``SnippetsMarkSkipped::run_on_model``), ops the plugin keeps for itself:

- post-op chains: oneDNN applies activations and per-channel/per-tensor
  scale-shift ops after a Convolution or MatMul (``isSuitableConvolutionParent``,
  ``isSuitableMatMulParent``, ``isSuitableChildForFusingSimple``,
  ``canBePerformedAsScaleShift``; see ``mark_skipped.py``);
- a MatMul's weights computed from constants only (a decompression
  ``Convert -> Multiply`` of constant weights): every op on that path
  (``isSuitableMatMulWithConstantPath``, ``visit_constant_path``).

The tokenization callback (``transformation_pipeline.cpp``, ``MainSnippets``,
the callback set on ``snippets::pass::TokenizeSnippets``) declines a node that

1. is dynamic (``n->is_dynamic()``);
2. is not a supported op (``is_supported_op``: on x64, Broadcast is
   ``is_unsupported_by_common_tokenization``; it is tokenized only inside MHA
   patterns);
3. has only Constant inputs (``has_only_const_inputs``);
4. has a tensor of rank above 6 (``has_supported_tensors``), or of an element
   type other than f32, bf16, f16, i8, u8 (``has_supported_tensors``'s
   ``supported_element_types``; i32 only as an input of Transpose, Broadcast,
   ReduceMax or ReduceSum, none of which the common tokenization takes): the
   element types are ``elem_types`` below, checked by the tokenizer itself.

Not expressible here: Swish with a non-Constant beta input (our Swish's beta is
an attribute), Mish, Transpose/Softmax/MatMul/Reduce* (layers, never
tokenized), multi-body ops (``MarkSubgraphOpAsSkipped``), zero-point Subtracts
of u8 convolutions (``isSuitableSubtractAsZeroPointsParent``) and bf16
inference-precision Converts (``isSuitableConvert``, only with bf16 inference).
"""

from __future__ import annotations

from vpuc.fusion.targets import TargetMachine
from vpuc.fusion.targets.mark_skipped import SKIPPED, ChainRule, mark_post_op_chains
from vpuc.ir.graph import CONSTANT, SCALAR, Graph, GraphIndex, GraphOp
from vpuc.ir.graph_ops import OPS
from vpuc.ir.types import ElemType

ONEDNN_POST_OPS = ChainRule(
    backend="oneDNN",
    activations=frozenset({"Relu", "Elu", "Sigmoid", "Clamp", "Swish", "HSwish", "Tanh", "Gelu",
                           "Abs", "Sqrt"}),
    bias_kinds=frozenset({"Add", "Multiply", "Subtract", "Divide"}),
    max_biases=8, max_activations=8, activation_last=False)

# transformation_pipeline.cpp, MainSnippets, has_supported_tensors: "Check for supported ranks".
MAX_RANK = 6
# transformation_pipeline.cpp, MainSnippets, is_supported_op (x64):
# is_unsupported_by_common_tokenization lists the ops of this kind our dialect has.
COMMON_TOKENIZATION_REFUSES = {"Broadcast": "is tokenized only as part of an MHA pattern"}


def _constant_values(graph: Graph) -> set[str]:
    """Values computed from Constants only (OpenVINO's ``ov::op::util::is_on_constant_path``);
    the ops are in topological order, so one walk decides them all."""
    constant: set[str] = set()
    for op in graph.ops:
        if op.result is None:
            continue
        if op.kind in (CONSTANT, SCALAR) or (op.operands and all(o in constant for o in op.operands)):
            constant.add(op.result)
    return constant


def mark_matmul_constant_weights(graph: Graph) -> None:
    """snippets_mark_skipped.cpp, SnippetsMarkSkipped::run_on_model with
    isSuitableMatMulWithConstantPath: a MatMul whose weights (input 1) are not a
    Constant but are computed from Constants only keeps that path out of Snippets
    (``visit_constant_path`` marks every op on it)."""
    index, constant = graph.index(), _constant_values(graph)
    for op in graph.ops:
        if op.kind != "MatMul" or op.operands[1] not in constant \
                or index.producer(op.operands[1]).kind in (CONSTANT, SCALAR):
            continue
        pending, seen = [op.operands[1]], set()
        while pending:
            node = index.producer(pending.pop())
            if node.kind in (CONSTANT, SCALAR) or node.result in seen:
                continue
            seen.add(node.result)
            node.marks.setdefault(SKIPPED, f"the CPU plugin computes the constant weights of "
                                           f"{op.label} (MatMul)")
            pending.extend(node.operands)


def mark_cpu_plugin_skipped(graph: Graph) -> None:
    mark_post_op_chains(graph, ONEDNN_POST_OPS)   # clears every earlier mark first
    mark_matmul_constant_weights(graph)


def tokenization_callback(op: GraphOp, index: GraphIndex) -> str | None:
    """Why the CPU plugin's TokenizeSnippets callback declines ``op``, or None.

    transformation_pipeline.cpp, Transformations::MainSnippets, the callback set
    with CPU_SET_CALLBACK_COMMON(..., snippets::pass::TokenizeSnippets); the
    checks run in the callback's order."""
    values = [index.producer(o).type for o in op.operands] + [op.type]
    # 1. `if (n->is_dynamic() || !is_supported_op(n)) return true;`
    if any(not t.is_static for t in values):
        dynamic = next(t for t in values if not t.is_static)
        return (f"{op.kind} has a dynamic shape ({dynamic.shape_str()}); the CPU plugin does "
                "not tokenize dynamic nodes")
    if op.kind in COMMON_TOKENIZATION_REFUSES:
        return f"{op.kind} {COMMON_TOKENIZATION_REFUSES[op.kind]}, not by the common tokenization"
    # 3. has_only_const_inputs: "todo: clarify whether we can evaluate snippets on const paths".
    if op.operands and all(index.producer(o).kind in (CONSTANT, SCALAR) for o in op.operands):
        return f"{op.kind} reads Constants only; the CPU plugin leaves constant paths to constant folding"
    # 4. has_supported_tensors: ranks above 6 are refused (element types: elem_types).
    deepest = max(values, key=lambda t: t.rank)
    if deepest.rank > MAX_RANK:
        return (f"{op.kind} has a rank-{deepest.rank} tensor ({deepest.shape_str()}); the CPU "
                f"plugin tokenizes ranks up to {MAX_RANK}")
    return None


X64 = TargetMachine(
    name="x64",
    summary="OpenVINO CPU plugin, x64 AVX2: 16 GPRs, 16 vector registers of 8 f32 lanes",
    data_pointers=11,
    vector_registers=16,
    lanes={ElemType.F32: 8, ElemType.I32: 8, ElemType.BF16: 16, ElemType.F16: 16, ElemType.I8: 32, ElemType.U8: 32},
    elem_types=frozenset({ElemType.F32, ElemType.BF16, ElemType.F16, ElemType.I8, ElemType.U8}),
    tokenizable=frozenset(n for n, s in OPS.items() if s.elementwise),
    mark_skipped=mark_cpu_plugin_skipped,
    refuse=tokenization_callback,
    positioned_passes=(("after:convert-power-to-power-static", "mul-add-to-fma"),),
    sources={"data_pointers": "OpenVINO intel_cpu transformation_pipeline.cpp: data_ptr_gpr_count = 11",
             "vector_registers": "AVX2 ymm0..ymm15, 8 x f32",
             "elem_types": "transformation_pipeline.cpp, MainSnippets, has_supported_tensors: "
                           "supported_element_types (x64)",
             "refuse": "transformation_pipeline.cpp, MainSnippets, TokenizeSnippets callback"},
)
