"""Models older than the importer's opset, converted by onnx's own version converter.

The ONNX zoo's models are opset 7 to 9 (IR version 3).  Rather than keep a second
set of converters for the old forms of Upsample, BatchNormalization, Dropout, Slice
and friends, the model is converted to ``MIN_OPSET`` with
``onnx.version_converter.convert_version``, the library the ONNX project keeps for
exactly this, and the importer reads the result.

The converter's own errors name neither the node nor the file reliably (some are C++
assertions with the op type, some shape-inference errors), so when it fails each node
is converted alone, in model order, and the first that fails alone is named.
"""

from __future__ import annotations

from pathlib import Path

from vpuc.diagnostics import VpucError


def upgrade_opset(path: Path, model, opset: int, target: int):
    """``model`` (default-domain ``opset``) converted to ``target``; a ``VpucError`` naming
    the file and, when one fails alone, the node the converter could not convert."""
    from onnx import version_converter
    try:
        return version_converter.convert_version(model, target)
    except Exception as exc:                  # RuntimeError, InferenceError, ValidationError
        reason = _first_line(exc)
    node = _first_failing_node(model, opset, target)
    where = (f"node '{node.name or node.output[0]}' ({node.op_type})" if node is not None
             else "the model")
    raise VpucError(f"{path}: onnx.version_converter cannot convert {where} from opset {opset} "
                    f"to {target}: {reason}") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _first_failing_node(model, opset: int, target: int):
    """The first node that the converter refuses as a one-node model with the types
    (where known) of its inputs and outputs in ``model``."""
    import onnx
    from onnx import helper, version_converter
    try:
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:                         # the types are a help, not a need
        typed = model
    graph = typed.graph
    types = {v.name: v.type for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
    initializers = {init.name: init for init in graph.initializer}
    untyped = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None)

    def value(name: str):
        info = onnx.ValueInfoProto(name=name)
        info.type.CopyFrom(types.get(name, untyped))
        return info

    for node in graph.node:
        inputs = [n for n in node.input if n]
        alone = helper.make_graph(
            [node], "node", [value(n) for n in inputs if n not in initializers],
            [value(n) for n in node.output if n],
            initializer=[initializers[n] for n in inputs if n in initializers])
        single = helper.make_model(alone, opset_imports=[helper.make_opsetid("", opset)],
                                   ir_version=max(model.ir_version, 4))   # IR 4: initializers apart
        try:
            version_converter.convert_version(single, target)
        except Exception:
            return node
    return None
