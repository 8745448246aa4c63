"""Einsum rewritten at import into the Transpose, Reshape, MatMul, ReduceSum and Multiply
vpuc lowers, so a contraction is a MatMul on the DPU.

The equation is parsed into one list of index labels per operand (an ellipsis becomes
labels of its own, right-aligned across the operands as numpy broadcasts them) and the
output's (given after ``->``, or ONNX's implicit form: the labels used once, in
alphabetical order, after the ellipsis).  The operands are then contracted left to right:

- a label of one operand that no other operand and not the output names is summed first
  (``ReduceSum``);
- two operands: the labels both hold and the result keeps are batch dims, those both hold
  and the result drops are contracted, the rest are free.  Each operand is transposed to
  ``[batch, free, contracted]`` (the right one to ``[batch, contracted, free]``: a
  transformer's ``K^T``, which the schedule folds into the MatMul's loads), its free and
  contracted dims merged by a Reshape, and one ``MatMul`` computes the product; with no
  contracted label the product is an elementwise ``Multiply`` (an outer product);
- the result is transposed to the output's order.

A constant operand (a Linear's weights) is transposed, reshaped and summed at import, so
no DMA rearranges it at run time.

A label twice in one operand (a diagonal or trace, ``ii->i``) is refused naming the
equation, and so is a contracted label whose sizes differ (broadcast over a sum).
"""

from __future__ import annotations

import math
import string

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder

ELLIPSIS = "..."


def _parse(b: GraphBuilder, equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """The labels of each operand and of the output; ellipsis dims as ``'.k'`` labels
    (``k`` counted from the broadcast shape's first dim)."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise b.error(f"Einsum '{equation}' names {len(terms)} operands; the node has {len(ranks)}")
    widths = []
    for term, rank in zip(terms, ranks):
        _check_term(b, equation, term)
        letters = len(term.replace(ELLIPSIS, ""))
        width = rank - letters if ELLIPSIS in term else 0
        if width < 0 or (ELLIPSIS not in term and letters != rank):
            raise b.error(f"Einsum '{equation}': term '{term}' has {letters} labels for an operand "
                          f"of rank {rank}")
        widths.append(width)
    span = max(widths, default=0)
    operands = [_labels(term, span - width, width) for term, width in zip(terms, widths)]
    if arrow:
        _check_term(b, equation, rhs)
        output = _labels(rhs, 0, span)
    else:                                   # implicit: the labels used once, sorted
        counts: dict[str, int] = {}
        for term in terms:
            for letter in term.replace(ELLIPSIS, ""):
                counts[letter] = counts.get(letter, 0) + 1
        output = [f".{k}" for k in range(span)] + sorted(c for c, n in counts.items() if n == 1)
    used = {label for labels in operands for label in labels}
    for labels, term in [*zip(operands, terms), (output, rhs if arrow else "")]:
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise b.error(f"Einsum '{equation}' repeats '{repeated[0]}' in term '{term}' (a diagonal "
                          "or trace); vpuc does not take it: take the diagonal before the Einsum")
    missing = [label for label in output if label not in used]
    if missing:
        raise b.error(f"Einsum '{equation}': output label '{missing[0]}' is in no operand")
    return operands, output


def _check_term(b: GraphBuilder, equation: str, term: str) -> None:
    rest = term.replace(ELLIPSIS, "", 1)
    if ELLIPSIS in rest or any(c not in string.ascii_letters for c in rest):
        raise b.error(f"Einsum '{equation}': term '{term}' must be letters and at most one '...'")


def _labels(term: str, first: int, width: int) -> list[str]:
    head, dots, tail = term.partition(ELLIPSIS)
    return list(head) + ([f".{first + k}" for k in range(width)] if dots else []) + list(tail)


def _sizes(b: GraphBuilder, equation: str, operands, shapes) -> dict[str, int]:
    """Each label's size: equal across operands, or (ellipsis dims) 1 where it broadcasts."""
    sizes: dict[str, int] = {}
    for labels, shape in zip(operands, shapes):
        for label, size in zip(labels, shape):
            have = sizes.get(label, size)
            if have != size and 1 not in (have, size):
                raise b.error(f"Einsum '{equation}': label '{label}' has sizes {have} and {size}")
            sizes[label] = max(have, size)
    return sizes


class _Operand:
    """A graph value, or a constant operand's array, and the label of each of its dims.
    A constant is transposed, reshaped and summed at import; it becomes a graph Constant
    only where an op reads it (a Linear's ``[out, in]`` weights are stored transposed)."""

    def __init__(self, b: GraphBuilder, value: str | None, labels: list[str],
                 array: np.ndarray | None = None, hint: str = "") -> None:
        self.b, self._value, self.labels, self.array, self.hint = b, value, list(labels), array, hint

    @property
    def value(self) -> str:
        if self._value is None:
            self._value = self.b.constant(self.array, self.hint)
        return self._value

    @property
    def shape(self) -> tuple[int, ...]:
        if self.array is not None:
            return tuple(self.array.shape)
        return tuple(self.b.types[self.value].dims)

    def size(self, label: str) -> int:
        return self.shape[self.labels.index(label)]

    def summed(self, drop: list[str], order: list[str] | None = None, out: str | None = None) -> _Operand:
        """The sum over ``drop``; named ``out`` when what is left is in ``order``."""
        if not drop:
            return self
        axes = tuple(self.labels.index(label) for label in drop)
        left = [label for label in self.labels if label not in drop]
        if self.array is not None:
            total = self.array.astype(np.float64).sum(axis=axes).astype(self.array.dtype)
            return _Operand(self.b, None, left, total, self.hint + ".sum")
        value = self.b.op("ReduceSum", [self.value], {"axes": axes, "keep_dims": False},
                          out=out if left == order else None)
        return _Operand(self.b, value, left)

    def arranged(self, order: list[str], out: str | None = None) -> _Operand:
        if order == self.labels:
            return self
        perm = tuple(self.labels.index(label) for label in order)
        if self.array is not None:
            return _Operand(self.b, None, order, np.ascontiguousarray(self.array.transpose(perm)),
                            self.hint + ".T")
        return _Operand(self.b, self.b.op("Transpose", [self.value], {"order": perm}, out=out), order)

    def reshaped(self, dims: list[int], labels: list[str], out: str | None = None) -> _Operand:
        if tuple(dims) == self.shape:
            return _Operand(self.b, self._value, labels, self.array, self.hint)
        if self.array is not None:
            return _Operand(self.b, None, labels, self.array.reshape(dims), self.hint)
        return _Operand(self.b, self.b.op("Reshape", [self.value], {"shape": tuple(dims)}, out=out), labels)


def _contract(b: GraphBuilder, equation: str, a: _Operand, c: _Operand, keep: set[str],
              order: list[str] | None = None, out: str | None = None) -> _Operand:
    """The product of ``a`` and ``c`` over the labels both hold that ``keep`` lacks; named
    ``out`` when its labels come out in ``order``."""
    batch = [label for label in a.labels if label in c.labels and label in keep]
    summed = [label for label in a.labels if label in c.labels and label not in keep]
    a_free = [label for label in a.labels if label not in c.labels]
    c_free = [label for label in c.labels if label not in a.labels]
    for label in summed:
        if a.size(label) != c.size(label):
            raise b.error(f"Einsum '{equation}' sums label '{label}' of sizes {a.size(label)} and "
                          f"{c.size(label)} (a broadcast sum); vpuc does not take it")
    labels = batch + a_free + c_free
    out = out if labels == order else None
    a = a.arranged(batch + a_free + summed)
    if not summed:                           # an outer product: broadcast both, multiply
        c = c.arranged(batch + c_free)
        left = a.reshaped(list(a.shape) + [1] * len(c_free), a.labels + c_free)
        right = c.reshaped([c.size(x) for x in batch] + [1] * len(a_free) + [c.size(x) for x in c_free],
                           batch + a_free + c_free)
        return _Operand(b, b.op("Multiply", [left.value, right.value], out=out), labels)
    c = c.arranged(batch + summed + c_free)
    k = math.prod(a.size(x) for x in summed)
    n = math.prod(c.size(x) for x in c_free)
    free_dims = [a.size(x) for x in a_free]
    if batch or not free_dims:               # [batch..., M, K]; without batch its free dims may lead
        left = a.reshaped([a.size(x) for x in batch] + [math.prod(free_dims), k], a.labels)
        merged = [a.size(x) for x in batch] + [math.prod(free_dims), n]
    else:
        left = a.reshaped(free_dims + [k], a.labels)
        merged = free_dims + [n]
    right = c.reshaped([c.size(x) for x in batch] + [k, n], c.labels)
    dims = [max(a.size(x), c.size(x)) for x in batch] + free_dims + [c.size(x) for x in c_free]
    last = tuple(merged) == tuple(dims)           # no Reshape after the MatMul
    product = _Operand(b, b.op("MatMul", [left.value, right.value], out=out if last else None), [])
    return _Operand(b, product.value, labels) if last else product.reshaped(dims, labels, out)


def _einsum(b, node, attrs):
    equation = attrs["equation"]
    if isinstance(equation, bytes):
        equation = equation.decode()
    shapes = [b.shape(name) for name in node.input]
    labels, output = _parse(b, equation, [len(s) for s in shapes])
    _sizes(b, equation, labels, shapes)
    operands = [_Operand(b, None, ls, np.asarray(b.array(name)), name) if b.is_known(name)
                else _Operand(b, b.value(name), ls) for name, ls in zip(node.input, labels)]
    acc = None
    for i, operand in enumerate(operands):
        later = {x for o in operands[i + 1:] for x in o.labels} | set(output)
        others = later | (set(acc.labels) if acc is not None else set())
        final = node.output[0] if i == len(operands) - 1 else None
        operand = operand.summed([x for x in operand.labels if x not in others], output, final)
        if acc is not None:
            acc = acc.summed([x for x in acc.labels if x not in later | set(operand.labels)])
        acc = operand if acc is None else _contract(b, equation, acc, operand, later, output, final)
        acc = acc.summed([x for x in acc.labels if x not in later])
    result = acc.arranged(output, out=node.output[0])
    if result.value != b.values.get(node.output[0]):
        b.values[node.output[0]] = result.value      # the last op made it under its own name


EINSUM_CONVERTERS = {"Einsum": _einsum}
