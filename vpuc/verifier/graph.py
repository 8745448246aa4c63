"""Graph rules: names resolve, ops match their spec, and every type is inferred.

``check_graph`` walks a graph once in order.  For each op it checks the kind
(unknown ops get a did-you-mean), the result name (defined once; Result
defines none), the operands (defined, and above their use: graphs are written
in topological order), the arity, the attributes (known, of the right kind,
required ones present; defaults filled in) and the Constant payload, then
infers the result type with the op's rule from ``graph_ops.py``.

A type written in the text must equal the inferred one.  ``check_graph`` runs
when a graph is parsed, so the IR always holds full types; passes that rewrite
a body call ``infer_graph`` to recompute them.  Errors never cascade: an op
whose operands have no type is skipped.
"""

from __future__ import annotations

from vpuc.diagnostics import DiagnosticBag, VpucError, closest_name
from vpuc.ir.graph import CONSTANT, RESULT, SCALAR, Graph, GraphOp, number_as_float
from vpuc.ir.graph_ops import FLOAT_TYPES, OPS, REQUIRED, AttrSpec, InferError, OpSpec
from vpuc.ir.module import Module, format_number
from vpuc.ir.types import Dynamic, ElemType, TensorType
from vpuc.verifier.declarations import value_problem


def check_graphs(module: Module, bag: DiagnosticBag) -> None:
    """Module-level rules: graph names are unique (bodies were checked when parsed)."""
    seen: dict[str, Graph] = {}
    for graph in module.graphs:
        first = seen.setdefault(graph.name, graph)
        if first is not graph:
            bag.error(graph.loc, f"duplicate graph @{graph.name}", ((first.loc, "first defined here"),))


def check_graph(graph: Graph, bag: DiagnosticBag, *, declared: bool = True) -> None:
    """Check every op of ``graph`` and set its inferred type.

    With ``declared`` (text just parsed), a type written on a computing op must
    match the inferred one; without it (a pass rewrote the graph) computed
    types are simply replaced.  Parameter, Constant, Scalar and an explicit
    Result type are always taken as given.
    """
    types: dict[str, TensorType | None] = {}
    defined_at: dict[str, GraphOp] = {}
    later = {op.result: op for op in graph.ops if op.result is not None}
    for op in graph.ops:
        spec = OPS.get(op.kind)
        if spec is None:
            bag.error(op.loc, f"unknown op '{op.kind}'" + _suggest(op.kind))
            _define(op, None, types, defined_at, bag)
            continue
        ok = _check_name(op, bag) & _check_attrs(op, spec, bag) & _check_arity(op, spec, bag)
        ins: list[TensorType | None] = []
        for operand in op.operands:
            if operand in types:
                ins.append(types[operand])
                continue
            ok = False
            if operand in later:
                bag.error(operand.loc, f"%{operand} is used before its definition; a graph lists "
                          "its ops in topological order", ((later[operand].loc, "defined here"),))
            else:
                bag.error(operand.loc, f"undefined value %{operand}")
        if op.type is not None and any(isinstance(d, int) and d < 1 for d in op.type.dims):
            # an empty tensor: nothing downstream lowers or runs one
            bag.error(op.loc, f"{op.kind} %{op.result} has type {op.type.shape_str()}, a dim of "
                      "size 0; expected sizes >= 1 (empty tensors are not supported)")
            ok = False
        if op.kind in (CONSTANT, SCALAR):
            ok &= _check_payload(op, bag)
        inferred = None
        if ok and all(t is not None for t in ins):
            inferred = _infer(op, spec, ins, bag, declared)
        _define(op, inferred, types, defined_at, bag)
    if not graph.results:
        bag.error(graph.loc, f"graph @{graph.name} has no Result; expected at least one "
                  "'Result(%value)'")


def infer_graph(graph: Graph) -> None:
    """Recompute every type after a rewrite; a failure is a bug in the pass."""
    bag = DiagnosticBag()
    check_graph(graph, bag, declared=False)
    if bag.has_errors:
        raise VpucError(f"internal: graph @{graph.name} is ill-typed after a rewrite: "
                        + "; ".join(d.message for d in bag.items))


# ----------------------------------------------------------------- pieces

def _suggest(kind: str) -> str:
    close = closest_name(kind, OPS) or closest_name(kind.capitalize(), OPS)
    return f"; did you mean '{close}'?" if close else "; see docs/vir.md for the op list"


def _define(op: GraphOp, inferred, types, defined_at, bag: DiagnosticBag) -> None:
    if op.result is None:
        return
    first = defined_at.get(op.result)
    if first is not None:
        bag.error(op.loc, f"%{op.result} is defined twice", ((first.loc, "first defined here"),))
        return
    defined_at[op.result] = op
    types[op.result] = inferred


def _check_name(op: GraphOp, bag: DiagnosticBag) -> bool:
    if op.kind == RESULT and op.result is not None:
        bag.error(op.loc, f"a Result defines no value; write 'Result({', '.join('%' + o for o in op.operands)})' "
                  f"without '%{op.result} ='")
        return False
    return True   # (the grammar gives every other op a result name)


def _check_arity(op: GraphOp, spec: OpSpec, bag: DiagnosticBag) -> bool:
    if len(op.operands) == spec.arity or (spec.arity < 0 and op.operands):
        return True
    wanted = {0: "no operands", 1: "1 operand", -1: "one or more operands"}.get(
        spec.arity, f"{spec.arity} operands")
    bag.error(op.loc, f"{op.kind} takes {wanted}; got {len(op.operands)}")
    return False


def _check_attrs(op: GraphOp, spec: OpSpec, bag: DiagnosticBag) -> bool:
    ok = True
    for name in list(op.attrs):
        attr = spec.attr(name)
        if attr is None:
            known = ", ".join(a.name for a in spec.attrs) or "none"
            bag.error(op.loc, f"{op.kind} has no attribute '{name}'; its attributes: {known}")
            del op.attrs[name]
            ok = False
            continue
        value = _coerce(op.attrs[name], attr)
        if value is None:
            bag.error(op.loc, f"attribute '{name}' of {op.kind} expects {attr.describe()}")
            ok = False
        else:
            op.attrs[name] = value
    for attr in spec.attrs:
        if attr.name in op.attrs:
            continue
        if attr.default is REQUIRED:
            bag.error(op.loc, f"{op.kind} needs attribute '{attr.name}' ({attr.describe()}), as in "
                      f"{op.kind}{{{attr.name} = ...}}")
            ok = False
        elif attr.default is not None:
            op.attrs[attr.name] = attr.default
    # Keep attributes in the spec's order so printing is canonical.
    order = {a.name: i for i, a in enumerate(spec.attrs)}
    op.attrs = dict(sorted(op.attrs.items(), key=lambda kv: order[kv[0]]))
    return ok


def _coerce(value, attr: AttrSpec):
    """The attribute value in canonical form, or None if it has the wrong kind."""
    kind = attr.kind
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return number_as_float(value) if is_int or isinstance(value, float) else None
    if kind == "int":
        return value if is_int else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind == "elem":
        return value if isinstance(value, ElemType) else None
    if kind == "str":
        return value if isinstance(value, str) else None
    if kind.startswith("enum:"):
        return value if isinstance(value, str) and value in kind[5:].split("|") else None
    if kind == "dim":
        return value if (is_int and value >= 1) or isinstance(value, Dynamic) else None
    if not isinstance(value, tuple):
        return None
    if kind == "ints":
        return value if all(isinstance(v, int) and not isinstance(v, bool) for v in value) else None
    if kind == "floats":
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        return tuple(number_as_float(v) for v in value) if numbers else None
    if kind == "dims":
        return value if all((isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, Dynamic)
                            for v in value) else None
    return None


def _check_payload(op: GraphOp, bag: DiagnosticBag) -> bool:
    t, init = op.type, op.const
    if t is None or init is None:
        return True   # the type rule reports a missing type
    if not t.is_static:
        bag.error(op.loc, f"{op.kind} %{op.result} has dynamic dims; constants are static")
        return False
    if op.kind == SCALAR and t.num_elements != 1:
        bag.error(op.loc, f"Scalar %{op.result} has type {t}; a Scalar holds one element")
        return False
    if init.values is not None and len(init.values) != t.num_elements:
        bag.error(op.loc, f"{op.kind} %{op.result} has {len(init.values)} values; expected "
                  f"{t.num_elements} for type {t.shape_str()}")
        return False
    for value in (init.values or ()) + ((init.splat,) if init.splat is not None else ()):
        problem = value_problem(value, t.elem)
        if problem is not None:
            bag.error(op.loc, f"{op.kind} %{op.result}: value {format_number(value)} {problem}")
            return False
    return True


def _infer(op: GraphOp, spec: OpSpec, ins: list[TensorType], bag: DiagnosticBag,
           declared: bool) -> TensorType | None:
    if spec.float_only:
        for t in ins:
            if t.elem not in FLOAT_TYPES:
                bag.error(op.loc, f"{op.kind} needs a float element type (f16, bf16, f32, f64); "
                          f"got {t.elem}")
                return None
    written = op.type
    if not declared and op.kind not in (CONSTANT, SCALAR, "Parameter", RESULT):
        op.type = None
    try:
        inferred = spec.infer(op, ins)
    except InferError as exc:
        text = str(exc)
        bag.error(op.loc, text if text.startswith(op.kind) else f"{op.kind}: {text}")
        return None
    if declared and written is not None and written != inferred and op.kind != RESULT:
        bag.error(op.loc, f"{op.kind} has type {written} written but its type is {inferred}")
    op.type = inferred
    return inferred
