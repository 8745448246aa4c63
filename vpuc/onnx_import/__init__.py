"""ONNX import: a model file → a graph-VIR module (`vpuc import`).

The walk is ``load_model`` (read, check, fix input shapes) → BatchNorm folding
→ one pass over the nodes in order: fold the node if its inputs are constants
(``fold.py``), otherwise convert it (``convert.py``, ``convert_layers.py``) →
the graph verifier types and canonicalizes the result.  ``write_import`` puts
the module in ``NAME.vir`` and its large constants in ``NAME.consts/*.npy``.

Precision: the NPU computes in f16 with f32 accumulation, so by default a
float model is imported as f16 (``precision="f16"``), as the NPU plugin does;
weights are converted at import, with a warning naming every constant that
overflows f16.  ``precision="f32"`` keeps f32 (the DPU does not take it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vpuc.diagnostics import Diagnostic, DiagnosticBag, Severity, VpucError
from vpuc.ir.graph import PARAMETER
from vpuc.ir.module import Buffer, BufferKind, Module
from vpuc.ir.types import ElemType, TensorType
from vpuc.onnx_import.attribute_use import AttributeUse, unread_attributes
from vpuc.onnx_import.boundary_types import input_elem, refused_input
from vpuc.onnx_import.builder import GraphBuilder, describe_node
from vpuc.onnx_import.channel_shuffle import fold_channel_shuffles
from vpuc.onnx_import.convert import CONVERTERS, supported_ops
from vpuc.onnx_import.convert_copy import COPY_CONVERTERS
from vpuc.onnx_import.convert_layers import LAYER_CONVERTERS
from vpuc.onnx_import.convert_if import inline_if
from vpuc.onnx_import.convert_nn import NN_CONVERTERS
from vpuc.onnx_import.quant_layers import QUANT_LAYER_CONVERTERS, integer_convolutions
from vpuc.onnx_import.convert_quant import (fake_quantized_outputs, fold_constant_quantizations,
                                            qoperator_refusal)
from vpuc.onnx_import.empty import empty_outputs, empty_through
from vpuc.onnx_import.group_norm_pattern import fuse_group_norms
from vpuc.onnx_import.fold import attributes, fold_batch_norms, fold_hard_sigmoids, fold_node
from vpuc.onnx_import.fold_channel_affine import fold_channel_affines
from vpuc.onnx_import.hard_swish import fuse_hard_swishes
from vpuc.onnx_import.patterns import fuse_layer_norms
from vpuc.onnx_import.qoperator import rewrite_qoperators
from vpuc.onnx_import.model import DEFAULT_DOMAINS, load_model, parse_input_shapes
from vpuc.onnx_import.output_copies import copy_unwritten_outputs

PRECISIONS = {"f16": ElemType.F16, "f32": ElemType.F32}

__all__ = ["ImportedModel", "import_onnx", "parse_input_shapes", "write_import", "supported_ops"]


@dataclass
class ImportedModel:
    module: Module
    arrays: dict[str, np.ndarray]          # graph Constant name -> values for its .npy file
    inputs: dict[str, str]                 # ONNX input name -> graph Parameter name
    outputs: dict[str, str]                # ONNX output name -> graph value name
    origin: dict[str, str]                 # graph value name -> ONNX node name
    warnings: list[Diagnostic] = field(default_factory=list)
    # outputs with a dim of 0, which the graph does not compute: program name -> type
    empty_outputs: dict[str, TensorType] = field(default_factory=dict)


def _module_name(path: str) -> str:
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in Path(path).stem) or "model"
    return stem if stem[0].isalpha() or stem[0] == "_" else "m_" + stem


def import_onnx(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
                precision: str = "f16") -> ImportedModel:
    """Import ``path``; raises ``VpucError`` naming the file, input or node at fault."""
    if precision not in PRECISIONS:
        raise VpucError(f"--precision {precision}: expected one of {', '.join(PRECISIONS)}")
    model = load_model(path, input_shapes)
    b = GraphBuilder("main", PRECISIONS[precision], model.path, model.opset)
    b.known.update(model.initializers)
    ranks = {name: len(shape) for name, shape in model.value_shapes.items()}
    ranks.update((name, len(shape)) for name, (shape, _) in model.inputs.items())
    nodes = integer_convolutions(rewrite_qoperators(model.nodes, b.known), b.known,
                                 set(model.outputs), b.merged_from)
    nodes = fold_constant_quantizations(b, nodes)
    nodes = fold_batch_norms(nodes, b.known, set(model.outputs), b.merged_from)
    nodes = fold_channel_affines(nodes, b.known, set(model.outputs), model.opset, b.merged_from,
                                 ranks)
    nodes = fuse_hard_swishes(nodes, b.known, set(model.outputs), b.merged_from)
    nodes = fold_hard_sigmoids(nodes, b.known, set(model.outputs), model.opset, b.merged_from)
    nodes = fuse_layer_norms(nodes, b.known, set(model.outputs), b.merged_from, ranks)
    shapes = {**model.value_shapes, **{name: shape for name, (shape, _) in model.inputs.items()}}
    nodes = fuse_group_norms(nodes, b.known, set(model.outputs), b.merged_from, shapes)
    nodes = fold_channel_shuffles(nodes, b.known, set(model.outputs), model.opset, b.merged_from,
                                  shapes)
    b.fake_quantized = fake_quantized_outputs(nodes, b.known, set(model.outputs))
    for name, (shape, dtype) in model.inputs.items():
        elem = input_elem(dtype, b.elem)
        if elem is None:
            raise refused_input(model.path, name, dtype)
        b.parameter(name, shape, elem)
    for node in nodes:
        _convert_node(b, node, model)
    b.node = None
    empty = empty_outputs(b, model.outputs, model.output_types)
    written = [name for name in model.outputs if name not in empty]
    inputs = {n: b.values[n] for n in model.inputs}    # before an output copy takes an input's name
    copy_unwritten_outputs(b, written)
    for name in written:
        b.result(name)
    module = Module(name=_module_name(model.path), arch="NPU37XX", graphs=[b.graph])
    if empty and not written:       # nothing to compute: the inputs alone, a program of no tasks
        module.graphs = []
        module.buffers = [Buffer(op.result, BufferKind.INPUT, op.type) for op in b.graph.ops
                          if op.kind == PARAMETER]
    _verify(module)
    warnings = [Diagnostic(Severity.NOTE, None, note) for note in model.notes]
    warnings += [Diagnostic(Severity.WARNING, None,
                           f"{model.path}: constant '{name}' has values beyond the f16 range "
                           f"(±{np.finfo(np.float16).max:g}); they become ±inf")
                for name in b.overflows]
    outputs = {n: empty[n][0] if n in empty else b.values.get(n, n) for n in model.outputs}
    return ImportedModel(module, b.arrays, inputs, outputs, b.origin, warnings,
                         dict(empty.values()))


def _convert_node(b: GraphBuilder, node, model) -> None:
    """Fold or convert one node (an If of a constant condition: its taken branch's nodes,
    each in turn), then check its outputs' shapes."""
    b.node = node
    if node.domain not in DEFAULT_DOMAINS:
        raise b.error(f"ops of domain '{node.domain}' are not supported; supported are the "
                      f"default-domain ops {', '.join(supported_ops())}")
    attrs = AttributeUse(attributes(node))
    if node.op_type == "If":
        inline_if(b, node, lambda inner: _convert_node(b, inner, model))
        b.node = node
    elif not fold_node(b, node, attrs) and not empty_through(b, node, model.value_shapes):
        convert = (CONVERTERS.get(node.op_type) or LAYER_CONVERTERS.get(node.op_type)
                   or NN_CONVERTERS.get(node.op_type) or COPY_CONVERTERS.get(node.op_type)
                   or QUANT_LAYER_CONVERTERS.get(node.op_type))
        if convert is None:
            raise b.error(qoperator_refusal(node.op_type) or f"{node.op_type} is not supported; "
                          f"supported ops: {', '.join(supported_ops())}")
        convert(b, node, attrs)
        unread = unread_attributes(node, attrs, model.opset)
        if unread:
            raise b.error(f"{node.op_type} " + "; ".join(unread))
    _check_shapes(b, node, model.value_shapes)


def _check_shapes(b: GraphBuilder, node, shapes: dict[str, tuple[int, ...]]) -> None:
    """Each output the node made has the shape ONNX's shape inference gives it: a converter
    that got an attribute wrong fails here, at its node, instead of computing something else."""
    if any(name in b.off_inference for name in node.input):
        b.off_inference.update(name for name in node.output if name)
    for name in node.output:
        if name in b.off_inference:
            continue
        want = shapes.get(name)
        if not name or want is None or not (b.is_known(name) or name in b.values):
            continue
        got = b.shape(name)
        if tuple(got) != want:
            raise b.error(f"output '{name}' came out {'x'.join(map(str, got)) or 'scalar'} but ONNX "
                          f"infers {'x'.join(map(str, want)) or 'scalar'}: vpuc converts this "
                          f"{node.op_type} wrongly (a bug; please report it with the model)")


def _verify(module: Module) -> None:
    from vpuc.verifier.graph import check_graph
    bag = DiagnosticBag()
    for graph in module.graphs:
        check_graph(graph, bag, declared=False)
    if bag.has_errors:                   # a converter produced something the dialect refuses: say so
        raise VpucError(bag.items)


def write_import(imported: ImportedModel, vir_path: str | Path) -> list[Path]:
    """``vir_path`` and its ``.consts`` folder; returns the files written.

    Every file is written atomically; the .vir goes last, so a failure leaves
    no module that names missing constants."""
    from vpuc.fileio import write_atomically
    from vpuc.vir.printer import print_module
    vir_path = Path(vir_path)
    consts_dir = vir_path.with_name(vir_path.stem + ".consts")
    written = []
    for op in (op for graph in imported.module.graphs for op in graph.ops):
        if op.const is not None and op.const.path is not None and op.result in imported.arrays:
            op.const.path = f"{consts_dir.name}/{op.result}.npy"
    for folder in [vir_path.parent] + ([consts_dir] if imported.arrays else []):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VpucError(f"cannot create {folder}: {exc.strerror}") from None
    for name, array in imported.arrays.items():
        target = consts_dir / f"{name}.npy"
        write_atomically(target, _npy_bytes(array))
        written.append(target)
    write_atomically(vir_path, print_module(imported.module).encode())
    written.append(vir_path)
    return written


def _npy_bytes(array: np.ndarray) -> bytes:
    import io
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def node_description(node, opset: int) -> str:
    return describe_node(node, opset)
