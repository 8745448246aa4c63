"""A Power by a constant exponent rewritten before tokenizing as square roots, products
and reciprocals, where that is cheaper and means the same.

The generated kernel of a general ``x ** c`` is ``exp(c log|x|)`` with its rounding error
fixed up and the signs and special cases selected (``generator/emitters/math_ops.py``,
``power``): two transcendentals (``vlog``, ``vexp``, the ISA table's ``vsfu`` unit) and
about 13 other instructions per vector, all on one chain.  For the exponents below,
square roots (``vsqrt``), products (``vmul``) and reciprocals (``Power(v, -1)``, which
the generator emits as ``vrcp``) compute the same value in at most 4 instructions and at
most 2 long-latency ones (``FORMS``; ``cheaper`` compares them by the ISA table's units).
LRN's ``t ** -0.75`` (AlexNet, Inception v1) is the case that matters.

The rewrite is made in the graph, not only in the emitted code, so the body a kernel
records and the reference executor compute the same arithmetic.  The form runs in f32
between two Converts (f16 or bf16 in, the same out): each op is correctly rounded in
f32, so the form is within ``ERROR_BOUNDS[c]`` f32 units of roundoff (relative, first
order: a square root halves its operand's relative error, a product adds its operands')
of the exact power, far below the final rounding to f16 or bf16.  f32 graphs keep their
Power (there the form's few f32 roundings are the result's own).

Meaning: for ``x >= +0`` (sign bit clear), +inf and NaN every form is IEEE ``pow``
(``pow(+0, c<0) = +inf``, ``pow(+inf, c) = inf`` or ``+0``, NaN propagates).  It is not
for ``-0`` (``sqrt(-0) = -0``, so ``1/sqrt(-0) = -inf``, IEEE says +inf) nor ``-inf``
(``sqrt(-inf)`` is NaN, IEEE ``pow(-inf, 0.75) = +inf``), so a fractional exponent is
rewritten only where ``sign_clear`` proves its base never has the sign bit set (NaN
aside): squares, sums and products of such values, their convolutions, square roots,
exponentials, absolute values, constants of such numbers (LRN's base is one).  The
integer exponent 3 (``x * x * x``) means the same on every input, signs included.

Expects: a typed graph.  Guarantees: each rewritten Power's value is defined by the
form's last op (a Convert), at its location and provenance; the graph is re-typed.
"""

from __future__ import annotations

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.ir.graph import CONSTANT, SCALAR, Graph, GraphIndex, GraphOp, fresh_in
from vpuc.ir.module import ConstInit
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.shave.isa import BY_MNEMONIC
from vpuc.verifier.graph import infer_graph

# Each form as (op, operand names) steps over "x"; "rcp" is Power(v, -1).  Steps name
# their value by position ("s0", "s1", ...); the last step is the power.
FORMS: dict[float, tuple[tuple[str, tuple[str, ...]], ...]] = {
    -0.5: (("sqrt", ("x",)), ("rcp", ("s0",))),
    0.25: (("sqrt", ("x",)), ("sqrt", ("s0",))),
    -0.25: (("sqrt", ("x",)), ("sqrt", ("s0",)), ("rcp", ("s1",))),
    0.75: (("sqrt", ("x",)), ("sqrt", ("s0",)), ("mul", ("s0", "s1"))),
    -0.75: (("sqrt", ("x",)), ("sqrt", ("s0",)), ("mul", ("s0", "s1")), ("rcp", ("s2",))),
    1.5: (("sqrt", ("x",)), ("mul", ("x", "s0"))),
    3.0: (("mul", ("x", "x")), ("mul", ("s0", "x"))),
}
# First-order relative error of each form against the exact power, in f32 units of
# roundoff u = 2^-24 (one ulp is at most 2u relative): every step rounds once (1u), a
# square root halves the error its operand carries, a product adds its operands' and a
# reciprocal passes its operand's on.
ERROR_BOUNDS = {-0.5: 2.0, 0.25: 1.5, -0.25: 2.5, 0.75: 3.5, -0.75: 4.5, 1.5: 2.0, 3.0: 2.0}
INTEGER_EXPONENTS = frozenset({3.0})      # no domain condition: x*x*x is pow(x, 3) everywhere
STEP_MNEMONIC = {"sqrt": "vsqrt.f32", "mul": "vmul.f32", "rcp": "vrcp.f32"}
# The generic Power's code for a constant non-integer exponent, as math_ops.power emits it
POWER_MNEMONICS = ("vabs.f32", "vlog.f32", "vmul.f32", "vneg.f32", "vfma.f32", "vexp.f32",
                   "vfma.f32", "vcmpeq.f32", "vsel", "vcmplt.f32", "vcmplt.f32", "mand", "vsel",
                   "vcmpeq.f32", "vsel")
LONG_LATENCY_UNITS = frozenset({"vsfu", "vdiv"})       # ISA table units of 10+ cycles
NARROW = (ElemType.F16, ElemType.BF16)


def _units(mnemonics) -> list[str]:
    return [BY_MNEMONIC[m].unit for m in mnemonics]


def cheaper(exponent: float) -> bool:
    """Whether the ISA table makes ``FORMS[exponent]`` cheaper than the generic Power:
    fewer instructions and no more long-latency ones."""
    form = _units(STEP_MNEMONIC[step] for step, _ in FORMS[exponent])
    power = _units(POWER_MNEMONICS)
    slow = lambda units: sum(u in LONG_LATENCY_UNITS for u in units)
    return len(form) < len(power) and slow(form) <= slow(power)


def _constant_values(op: GraphOp) -> np.ndarray | None:
    from vpuc.reference.graph import constant_value
    if op.kind not in (CONSTANT, SCALAR) or op.const is None:
        return None
    try:
        return np.asarray(constant_value(op), np.float64)
    except VpucError:              # a file the lowering cannot read proves nothing here
        return None


def sign_clear(index: GraphIndex, value: str, memo: dict[str, bool]) -> bool:
    """Whether every element of ``value`` has its sign bit clear (+0 to +inf) or is NaN."""
    if value in memo:
        return memo[value]
    memo[value] = False                        # a cycle proves nothing
    op = index.producer(value)
    clear = lambda v: sign_clear(index, v, memo)
    if op.kind in (CONSTANT, SCALAR):
        data = _constant_values(op)
        result = data is not None and bool(np.all(np.isnan(data) | ~np.signbit(data)))
    elif op.kind == "Multiply" and op.operands[0] == op.operands[1]:
        result = True                          # a square: (-0)(-0) = +0, (-inf)^2 = +inf
    elif op.kind in ("Multiply", "Add", "Convolution", "Sqrt", "Convert"):
        result = all(clear(v) for v in op.operands)
    else:
        result = op.kind in ("Abs", "Exp", "Sigmoid")
    memo[value] = result
    return result


def exponent_of(index: GraphIndex, op: GraphOp) -> float | None:
    """The one constant exponent of a Power that does not broadcast its base, or None."""
    base, exponent = op.operands
    data = _constant_values(index.producer(exponent))
    if data is None or data.size == 0 or index.producer(base).type.dims != op.type.dims:
        return None
    first = float(data.ravel()[0])
    return first if bool(np.all(data == first)) else None


def _form_ops(op: GraphOp, exponent: float, taken: set) -> list[GraphOp]:
    """The Converts and steps that compute ``op``'s value by ``FORMS[exponent]``."""
    ops: list[GraphOp] = []

    def add(kind, operands, attrs=None, result=None, t=None, const=None):
        result = result or fresh_in(f"{op.result}.{kind.lower()}", taken)
        taken.add(result)
        ops.append(GraphOp(kind, result, tuple(operands), dict(attrs or {}), t, const,
                           loc=op.loc, origin=op.origin))
        return result

    names = {"x": add("Convert", [op.operands[0]], {"to": ElemType.F32})}
    minus_one = None
    for n, (step, args) in enumerate(FORMS[exponent]):
        operands = [names[a] for a in args]
        if step == "sqrt":
            value = add("Sqrt", operands)
        elif step == "mul":
            value = add("Multiply", operands)
        else:
            if minus_one is None:
                minus_one = add(CONSTANT, [], t=TensorType((), ElemType.F32, DimsOrder.identity(0)),
                                const=ConstInit(values=(-1.0,)))
            value = add("Power", [operands[0], minus_one])
        names[f"s{n}"] = value
    add("Convert", [value], {"to": op.type.elem}, result=op.result)
    return ops


def rewrite_powers(graph: Graph) -> bool:
    """Rewrite ``graph`` in place; True when some Power was rewritten."""
    index = graph.index()
    taken = {op.result for op in graph.ops}
    memo: dict[str, bool] = {}
    ops: list[GraphOp] = []
    exponents: set[str] = set()
    changed = False
    for op in graph.ops:
        exponent = exponent_of(index, op) if op.kind == "Power" else None
        if (exponent is None or exponent not in FORMS or op.type.elem not in NARROW
                or not cheaper(exponent)
                or (exponent not in INTEGER_EXPONENTS
                    and not sign_clear(index, op.operands[0], memo))):
            ops.append(op)
            continue
        ops.extend(_form_ops(op, exponent, taken))
        exponents.add(op.operands[1])
        changed = True
    if changed:
        read = {v for op in ops for v in op.operands}
        graph.ops = [op for op in ops if op.kind not in (CONSTANT, SCALAR) or op.result in read
                     or op.result not in exponents]      # exponents no other op reads
        infer_graph(graph)
    return changed
