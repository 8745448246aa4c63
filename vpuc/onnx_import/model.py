"""Reading an ONNX model: load, check, fix the input shapes, and name what is wrong.

Everything that can go wrong with the file itself (not a file, not an ONNX
protobuf, a checker failure, an opset out of range, an input whose dims are
not known) is a ``VpucError`` that names the file and, where there is one, the
input or node.  The rest of the importer sees a ``LoadedModel``: nodes in
topological order, initializers as numpy arrays, and every graph input with a
fully static shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.onnx_import.upgrade import upgrade_opset

# The oldest default-domain opset we convert from: opset 11 is where Resize, Pad and
# Clip took their modern input-based forms, and what most exporters still emit.
MIN_OPSET = 11
# Older models (the ONNX zoo's opset 7 to 10 ones) are first converted to MIN_OPSET by
# onnx's own version converter (``upgrade.py``); older still is refused.
OLDEST_CONVERTED = 7
DEFAULT_DOMAINS = ("", "ai.onnx")


def _onnx():
    try:
        import onnx
    except ImportError:                       # pragma: no cover - onnx is a dependency
        raise VpucError("reading ONNX models needs the 'onnx' package (pip install onnx)") from None
    return onnx


def newest_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` knows."""
    return _onnx().defs.onnx_opset_version()


@dataclass
class LoadedModel:
    path: str
    opset: int
    nodes: list                                  # onnx.NodeProto, topologically ordered
    initializers: dict[str, np.ndarray]
    inputs: dict[str, tuple[tuple[int, ...], np.dtype]]   # graph inputs that are not initializers
    outputs: list[str]
    producer: str = ""
    value_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)   # what the import did to the file (stderr)
    output_types: dict[str, np.dtype] = field(default_factory=dict)   # as the model declares


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``NAME=1x3x224x224`` strings (the ``--input-shape`` option) as a dict."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d <= 0 for d in shape):
            raise VpucError(f"--input-shape '{spec}': expected NAME=DIMS with positive dims "
                            "joined by 'x', such as input=1x3x224x224")
        shapes[name] = shape
    return shapes


def _read(path: Path):
    onnx = _onnx()
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise VpucError(f"{path}: is a directory, not an ONNX model") from None
    except FileNotFoundError:
        raise VpucError(f"{path}: no such file") from None
    except OSError as exc:
        raise VpucError(f"{path}: cannot read the file ({exc.strerror.lower()})") from None
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:                  # protobuf raises its own DecodeError types
        raise VpucError(f"{path}: not an ONNX model (the protobuf does not decode: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    if not model.HasField("graph") or not model.graph.output:
        raise VpucError(f"{path}: the ONNX model has no graph outputs")
    return model, data


def declared_input_types(path: str | Path) -> dict[str, np.dtype]:
    """The element type each graph input of the (already loaded and checked) model at
    ``path`` declares, by its ONNX name: what ``vpuc run --input`` may give it."""
    onnx = _onnx()
    model, _ = _read(Path(path))
    initializers = {init.name for init in model.graph.initializer}
    return {value.name: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
            for value in model.graph.input if value.name not in initializers}


def declared_output_types(path: str | Path) -> dict[str, np.dtype]:
    """The element type each graph output of the model at ``path`` declares, by its ONNX
    name: what ``vpuc run`` writes it as (an i32 result as int64, a u8 boolean as bool)."""
    onnx = _onnx()
    model, _ = _read(Path(path))
    return {value.name: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
            for value in model.graph.output if value.type.tensor_type.elem_type}


def constant_inputs(path: str | Path) -> set[str]:
    """The names of the model's initializers that IR version 3 also lists as graph inputs:
    constants vpuc compiles into the blob, which a run cannot override (ONNX lets a runtime
    feed them; vpuc folds them into the weights)."""
    model, _ = _read(Path(path))
    initializers = {init.name for init in model.graph.initializer}
    return {value.name for value in model.graph.input if value.name in initializers}


def _opset(path: Path, model) -> int:
    versions = {imp.domain: imp.version for imp in model.opset_import}
    version = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    if version is None:
        raise VpucError(f"{path}: the model imports no default-domain (ai.onnx) opset")
    newest = newest_opset()
    if not OLDEST_CONVERTED <= version <= newest:
        raise VpucError(f"{path}: opset {version} is outside the supported range "
                        f"{OLDEST_CONVERTED} to {newest} (the newest this 'onnx' knows; opsets "
                        f"before {MIN_OPSET} are converted to {MIN_OPSET} at import)")
    return version


def _static_shape(path: Path, value, given: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    name = value.name
    dims = value.type.tensor_type.shape.dim if value.type.tensor_type.HasField("shape") else None
    declared = None if dims is None else [d.dim_value if d.HasField("dim_value") else None for d in dims]
    if name in given:
        shape = given[name]
        if declared is not None and len(declared) != len(shape):
            raise VpucError(f"{path}: --input-shape {name}={'x'.join(map(str, shape))} has rank "
                            f"{len(shape)}; the model's input '{name}' has rank {len(declared)}")
        for axis, (want, got) in enumerate(zip(declared or [], shape)):
            if want is not None and want != got:
                raise VpucError(f"{path}: --input-shape {name}: dim {axis} is {got}; "
                                f"the model fixes it to {want}")
        return shape
    if declared is None or any(d is None for d in declared):
        spelled = "?" if declared is None else "x".join("?" if d is None else str(d) for d in declared)
        raise VpucError(f"{path}: input '{name}' has dims {spelled} that are not fixed; "
                        f"give them with --input-shape {name}=...")
    return tuple(declared)


def _fix_inputs(path: Path, model, given: dict[str, tuple[int, ...]]) -> None:
    onnx = _onnx()
    initializer_names = {init.name for init in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in initializer_names]
    unknown = sorted(set(given) - set(names))
    constants = [name for name in unknown if name in initializer_names]
    if constants:
        raise VpucError(f"{path}: --input-shape names '{constants[0]}', an initializer of the model "
                        "(IR version 3 lists initializers among the graph inputs): vpuc compiles "
                        "it as a constant of its own shape")
    if unknown:
        raise VpucError(f"{path}: --input-shape names '{unknown[0]}', which is not an input of the "
                        f"model; its inputs are {', '.join(names) or '(none)'}")
    for value in model.graph.input:
        if value.name in initializer_names:
            continue
        shape = _static_shape(path, value, given)
        elem = value.type.tensor_type.elem_type
        value.type.CopyFrom(onnx.helper.make_tensor_type_proto(elem, shape))


# Ops whose form in the opsets the checker calls deprecated exporters still write and
# onnxruntime still runs (GroupNormalization 18-20, scale and bias per group): such a model
# goes on to strict shape inference instead of being refused.
RUN_DEPRECATED = ("GroupNormalization",)


def deprecated_but_run(message: str) -> bool:
    return any(message.startswith(f"Op registered for {op} is deprecated") for op in RUN_DEPRECATED)


def _default_mvn_axes(model) -> None:
    """MeanVarianceNormalization's default axes written out: from opset 13 ONNX's function
    body for the op fails strict shape inference when ``axes`` is left unsaid, though the
    spec (and onnxruntime) define it as [0, 2, 3]."""
    for node in model.graph.node:
        if node.op_type == "MeanVarianceNormalization" and node.domain in ("", "ai.onnx") \
                and not any(a.name == "axes" for a in node.attribute):
            node.attribute.append(_onnx().helper.make_attribute("axes", [0, 2, 3]))


def load_model(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> LoadedModel:
    """Read, check and shape an ONNX model; every failure names the file and what."""
    onnx = _onnx()
    from onnx import numpy_helper
    path = Path(path)
    model, data = _read(path)
    opset = _opset(path, model)
    try:
        onnx.checker.check_model(data)        # the bytes read: the weights are not serialized again
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        if not deprecated_but_run(first):
            raise VpucError(f"{path}: the ONNX checker refuses the model: {first}") from None
    notes = []
    if opset < MIN_OPSET:
        model = upgrade_opset(path, model, opset, MIN_OPSET)
        notes.append(f"{path}: converted from opset {opset} to {MIN_OPSET} by "
                     f"onnx.version_converter {onnx.__version__}")
        opset = MIN_OPSET
    _fix_inputs(path, model, input_shapes or {})
    _default_mvn_axes(model)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:                  # InferenceError and friends
        first = str(exc).strip().splitlines()[0] if str(exc) else type(exc).__name__
        raise VpucError(f"{path}: ONNX shape inference fails: {first}") from None
    graph = model.graph
    initializers = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    inputs = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        inputs[value.name] = (tuple(d.dim_value for d in tensor.shape.dim),
                              onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    shapes = {}
    for value in list(graph.value_info) + list(graph.output):
        tensor = value.type.tensor_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            shapes[value.name] = tuple(d.dim_value for d in tensor.shape.dim)
    return LoadedModel(path=str(path), opset=opset, nodes=list(graph.node), initializers=initializers,
                       inputs=inputs, outputs=[o.name for o in graph.output],
                       producer=f"{model.producer_name} {model.producer_version}".strip(),
                       value_shapes=shapes, notes=notes,
                       output_types={o.name: onnx.helper.tensor_dtype_to_np_dtype(
                           o.type.tensor_type.elem_type) for o in graph.output
                           if o.type.tensor_type.elem_type})
