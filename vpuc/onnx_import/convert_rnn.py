"""LSTM, GRU and RNN (opsets 7 to 22) unrolled at import over their static sequence.

The sequence length is the input's dim once ``--input-shape`` has fixed it, so each
recurrent node becomes a straight chain of graph ops the lowering already takes:

- the input projection of every time step at once: ``X`` as ``[T*B, I]`` times the
  constant ``W^T`` of a direction, plus the biases that do not meet the reset gate,
  as one ``MatMul`` (one DPU layer for the whole sequence, not T small ones);
- per step, the step's rows of it (a ``Slice``: rows ``t*B ..`` in layout 0, every
  T-th row from ``t`` in layout 1), plus ``h @ R^T`` (the only per-step matmul; left
  out at the first step when the initial state is absent, i.e. zero), the gate
  activations on column slices, and the cell's elementwise update;
- ``Y`` stacked from the steps' ``h`` by Reshape and Concat, ``Y_h`` / ``Y_c`` the
  last step's state per direction; only the outputs the model reads are built.

The gates follow the ONNX operator spec (iofc for LSTM, zrh for GRU; GRU's
``linear_before_reset`` both ways: 0 takes a second per-step matmul of ``r * h``).
``activations`` may name Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Affine,
ScaledTanh, Elu, Softsign and Softplus, with ``activation_alpha`` / ``activation_beta``
consumed in order by the ones that take them (onnxruntime's defaults otherwise).
``clip``, a non-constant ``sequence_lens`` (or one shorter than the sequence),
``input_forget`` and non-zero peepholes ``P`` are refused with the node named.
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
# activation -> (its alpha's default, its beta's default), None where it takes none.  The
# spec gives no defaults; these are onnxruntime's (rnn_helpers.cc: LeakyRelu 0.01,
# HardSigmoid 0.2 and 0.5, Elu 1, any other 0, so a bare Affine or ScaledTanh is 0)
ACTIVATION_PARAMS = {"sigmoid": (None, None), "tanh": (None, None), "relu": (None, None),
                     "softsign": (None, None), "softplus": (None, None),
                     "hardsigmoid": (0.2, 0.5), "leakyrelu": (0.01, None), "affine": (0.0, 0.0),
                     "scaledtanh": (0.0, 0.0), "elu": (1.0, None)}


def _input(node, i: int) -> str | None:
    return node.input[i] if len(node.input) > i and node.input[i] else None


def _output(node, i: int) -> str | None:
    return node.output[i] if len(node.output) > i and node.output[i] else None


class _Activation:
    """One of the node's activation functions, applied to a graph value."""

    def __init__(self, b: GraphBuilder, name: str, alpha: float | None, beta: float | None) -> None:
        self.b, self.name, self.alpha, self.beta = b, name.lower(), alpha, beta
        if self.name == "leakyrelu" and not 0.0 <= alpha <= 1.0:
            raise b.error(f"LeakyRelu activation alpha {alpha} is outside [0, 1], where "
                          "max(x, alpha*x) holds")

    def _scalar(self, value: float, hint: str) -> str:
        return self.b.constant(np.asarray(value, np.float32), f"{self.b.node.output[0] or 'rnn'}.{hint}")

    def __call__(self, x: str) -> str:
        b, kind = self.b, self.name
        simple = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "softplus": "SoftPlus"}
        if kind in simple:
            return b.op(simple[kind], [x])
        if kind == "elu":
            return b.op("Elu", [x], {"alpha": float(self.alpha)})
        if kind == "softsign":
            one = self._scalar(1.0, "one")
            return b.op("Divide", [x, b.op("Add", [b.op("Abs", [x]), one])])
        if kind == "leakyrelu":
            return b.op("Maximum", [x, b.op("Multiply", [x, self._scalar(self.alpha, "alpha")])])
        if kind == "scaledtanh":
            inner = b.op("Tanh", [b.op("Multiply", [x, self._scalar(self.beta, "beta")])])
            return b.op("Multiply", [inner, self._scalar(self.alpha, "alpha")])
        affine = b.op("Add", [b.op("Multiply", [x, self._scalar(self.alpha, "alpha")]),
                              self._scalar(self.beta, "beta")])
        if kind == "affine":
            return affine
        return b.op("Clamp", [affine], {"min": 0.0, "max": 1.0})     # hardsigmoid


def _activations(b: GraphBuilder, node, attrs, directions: int) -> list[list[_Activation]]:
    """The activation functions of each direction, in the spec's order (f, g, h)."""
    per = len(DEFAULT_ACTIVATIONS[node.op_type])
    names = [n.decode() if isinstance(n, bytes) else n
             for n in attrs.get("activations") or DEFAULT_ACTIVATIONS[node.op_type] * directions]
    if len(names) != per * directions:
        raise b.error(f"{node.op_type} has {len(names)} activations; {directions} direction(s) "
                      f"take {per * directions}")
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    made = []
    for name in names:
        params = ACTIVATION_PARAMS.get(name.lower())
        if params is None:
            raise b.error(f"{node.op_type} activation {name} is not supported; supported: "
                          "Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Affine, ScaledTanh, Elu, "
                          "Softsign, Softplus")
        alpha, beta = params
        if alpha is not None and alphas:
            alpha = float(alphas.pop(0))
        if beta is not None and betas:
            beta = float(betas.pop(0))
        made.append(_Activation(b, name, alpha, beta))
    return [made[d * per:(d + 1) * per] for d in range(directions)]


def _refusals(b: GraphBuilder, node, attrs, steps: int) -> None:
    if attrs.get("clip") is not None:
        raise b.error(f"{node.op_type} clip={attrs['clip']} is not supported (a cell clip)")
    if int(attrs.get("input_forget", 0)) if node.op_type == "LSTM" else 0:
        raise b.error("LSTM input_forget=1 (coupled input and forget gates) is not supported")
    lens = _input(node, 4)
    if lens is not None:
        if not b.is_known(lens):
            raise b.error(f"{node.op_type} sequence_lens '{lens}' is computed at run time; vpuc "
                          "unrolls a static sequence and takes only a constant one equal to its length")
        if not (np.asarray(b.array(lens)) == steps).all():
            raise b.error(f"{node.op_type} sequence_lens {np.asarray(b.array(lens)).tolist()} are "
                          f"not all the sequence length {steps}; vpuc takes only full sequences")
    peepholes = _input(node, 7) if node.op_type == "LSTM" else None
    if peepholes is not None and (not b.is_known(peepholes) or np.any(b.array(peepholes))):
        raise b.error("LSTM peephole weights P are not supported (only absent or zero)")


class _Unroller:
    """The graph ops of one recurrent node, one direction at a time."""

    def __init__(self, b: GraphBuilder, node, attrs) -> None:
        self.b, self.node, self.kind = b, node, node.op_type
        self.layout = int(attrs.get("layout", 0))
        shape = b.shape(node.input[0])
        if len(shape) != 3:
            raise b.error(f"{self.kind} input X has rank {len(shape)}; expected 3")
        self.steps, self.batch = (shape[0], shape[1]) if self.layout == 0 else (shape[1], shape[0])
        self.w = np.asarray(b.array(node.input[1]), np.float32)
        self.r = np.asarray(b.array(node.input[2]), np.float32)
        gates = GATES[self.kind]
        self.directions, rows = self.w.shape[0], self.w.shape[1]
        self.hidden = int(attrs.get("hidden_size", rows // gates))
        if rows != gates * self.hidden or self.r.shape != (self.directions, rows, self.hidden):
            raise b.error(f"{self.kind} W {list(self.w.shape)} and R {list(self.r.shape)} do not "
                          f"hold {gates} gates of hidden_size {self.hidden}")
        direction = attrs.get("direction", "forward")
        want = 2 if direction == "bidirectional" else 1
        if direction not in ("forward", "reverse", "bidirectional") or self.directions != want:
            raise b.error(f"{self.kind} direction {direction!r} with {self.directions} weight set(s)")
        self.reverse = direction == "reverse"
        bias = _input(node, 3)
        self.bias = (np.asarray(b.array(bias), np.float32) if bias is not None
                     else np.zeros((self.directions, 2 * rows), np.float32))
        if self.bias.shape != (self.directions, 2 * rows):
            raise b.error(f"{self.kind} B has shape {list(self.bias.shape)}; expected "
                          f"{[self.directions, 2 * rows]}")
        self.linear_before_reset = bool(attrs.get("linear_before_reset", 0)) if self.kind == "GRU" else False
        _refusals(b, node, attrs, self.steps)
        self.activations = _activations(b, node, attrs, self.directions)
        self.tag = node.output[0] or next((o for o in node.output if o), "rnn")
        self.consts: dict[str, str] = {}

    # ------------------------------------------------------------- helpers

    def const(self, array: np.ndarray, hint: str) -> str:
        """A constant, stored once per hint: every step reads the same ``R^T``."""
        if hint not in self.consts:
            self.consts[hint] = self.b.constant(np.ascontiguousarray(array, np.float32), f"{self.tag}.{hint}")
        return self.consts[hint]

    def columns(self, value: str, begin: int, end: int) -> str:
        rows = self.b.types[value].dims[0]
        return self.b.op("Slice", [value], {"begin": (0, begin), "end": (rows, end), "step": (1, 1)})

    def initial(self, index: int, d: int) -> str | None:
        """Direction ``d``'s initial state as ``[B, H]``, None when absent or all zeros."""
        name = _input(self.node, index)
        if name is None:
            return None
        b, batch, hidden = self.b, self.batch, self.hidden
        want = (self.directions, batch, hidden) if self.layout == 0 else (batch, self.directions, hidden)
        if b.shape(name) != want:
            raise b.error(f"{self.kind} initial state '{name}' has shape {list(b.shape(name))}; "
                          f"expected {list(want)}")
        if b.is_known(name):
            array = np.asarray(b.array(name), np.float32)
            part = array[d] if self.layout == 0 else array[:, d]
            return self.const(part, f"init{index}.{d}") if np.any(part) else None
        value = b.value(name)
        begin, end = ((d, 0, 0), (d + 1, batch, hidden)) if self.layout == 0 else \
            ((0, d, 0), (batch, d + 1, hidden))
        part = b.op("Slice", [value], {"begin": begin, "end": end, "step": (1, 1, 1)})
        return b.op("Reshape", [part], {"shape": (batch, hidden)})

    def projection(self, d: int) -> str:
        """``X W^T + biases`` of every step at once, as ``[T*B, gates*H]``."""
        b, node = self.b, self.node
        x = b.value(node.input[0])
        inputs = b.shape(node.input[0])[2]
        flat = b.op("Reshape", [x], {"shape": (self.steps * self.batch, inputs)})
        y = b.op("MatMul", [flat, self.const(self.w[d].T, f"W{d}.T")])
        rows = self.w.shape[1]
        bias = self.bias[d, :rows] + self.bias[d, rows:]
        if self.linear_before_reset:            # the h gate's Rb waits for the reset gate
            bias[2 * self.hidden:] = self.bias[d, 2 * self.hidden:rows]
        return b.op("Add", [y, self.const(bias, f"B{d}")]) if np.any(bias) else y

    def step_rows(self, projected: str, t: int) -> str:
        width = self.b.types[projected].dims[1]
        if self.layout == 0:
            begin, end, step = (t * self.batch, 0), ((t + 1) * self.batch, width), (1, 1)
        else:
            begin, end, step = (t, 0), (self.steps * self.batch, width), (self.steps, 1)
        return self.b.op("Slice", [projected], {"begin": begin, "end": end, "step": step})

    def recurrent(self, h: str | None, r: np.ndarray, hint: str) -> str | None:
        return None if h is None else self.b.op("MatMul", [h, self.const(r.T, hint)])

    def plus(self, a: str, c: str | None) -> str:
        return a if c is None else self.b.op("Add", [a, c])

    # ------------------------------------------------------------- cells

    def lstm(self, d, x_t, h, c, acts, r_hint):
        b, hid = self.b, self.hidden
        gates = self.plus(x_t, self.recurrent(h, self.r[d], r_hint))
        f, g, act_h = acts
        sig = f(self.columns(gates, 0, 3 * hid))                  # i, o, f together
        cand = g(self.columns(gates, 3 * hid, 4 * hid))
        i, o, fg = (self.columns(sig, k * hid, (k + 1) * hid) for k in range(3))
        new_c = b.op("Multiply", [i, cand])
        if c is not None:
            new_c = b.op("Add", [b.op("Multiply", [fg, c]), new_c])
        return b.op("Multiply", [o, act_h(new_c)]), new_c

    def gru(self, d, x_t, h, acts, r_hint):
        b, hid = self.b, self.hidden
        f, g = acts
        rows = 3 * hid
        if self.linear_before_reset:
            q = self.recurrent(h, self.r[d], r_hint)
            if q is not None and np.any(self.bias[d, rows + 2 * hid:]):
                only_h = np.concatenate([np.zeros(2 * hid, np.float32), self.bias[d, rows + 2 * hid:]])
                q = b.op("Add", [q, self.const(only_h, f"Rbh{d}")])
            zr = f(self.plus(self.columns(x_t, 0, 2 * hid), None if q is None else self.columns(q, 0, 2 * hid)))
            z, r = self.columns(zr, 0, hid), self.columns(zr, hid, 2 * hid)
            reset = (b.op("Multiply", [r, self.columns(q, 2 * hid, rows)]) if q is not None else
                     b.op("Multiply", [r, self.const(self.bias[d, rows + 2 * hid:][None, :], f"Rbh{d}.first")]))
        else:
            q = self.recurrent(h, self.r[d, :2 * hid], r_hint)
            zr = f(self.plus(self.columns(x_t, 0, 2 * hid), q))
            z, r = self.columns(zr, 0, hid), self.columns(zr, hid, 2 * hid)
            reset = None if h is None else self.recurrent(b.op("Multiply", [r, h]), self.r[d, 2 * hid:], r_hint + "h")
        cand = g(self.plus(self.columns(x_t, 2 * hid, rows), reset))
        # h' = (1 - z) * cand + z * h  ==  cand + z * (h - cand)
        if h is None:
            return b.op("Subtract", [cand, b.op("Multiply", [z, cand])])
        return b.op("Add", [cand, b.op("Multiply", [z, b.op("Subtract", [h, cand])])])

    def rnn(self, d, x_t, h, acts, r_hint):
        return acts[0](self.plus(x_t, self.recurrent(h, self.r[d], r_hint)))

    # ------------------------------------------------------------- directions

    def direction(self, d: int, keep_steps: bool) -> tuple[list[str], str, str | None]:
        """Direction ``d``: its steps' ``h`` stacked as ``Y`` is (when ``keep_steps``), in groups
        of about sqrt(T) consecutive times in time order, its last ``h`` and ``c``.  Each group's
        Concat is emitted as soon as its last step is: a step's ``h`` read only by a Concat
        after the whole sequence would hold its barrier to the end, and 2 T of them outlast
        the target's 64 physical barriers."""
        projected = self.projection(d)
        h, c = self.initial(5, d), self.initial(6, d) if self.kind == "LSTM" else None
        backward = self.reverse or d == 1
        order = range(self.steps - 1, -1, -1) if backward else range(self.steps)
        size = math.isqrt(self.steps - 1) + 1
        pending: dict[int, str] = {}
        groups: dict[int, str] = {}
        r_hint = f"R{d}.T"
        for t in order:
            x_t = self.step_rows(projected, t)
            if self.kind == "LSTM":
                h, c = self.lstm(d, x_t, h, c, self.activations[d], r_hint)
            elif self.kind == "GRU":
                h = self.gru(d, x_t, h, self.activations[d], r_hint)
            else:
                h = self.rnn(d, x_t, h, self.activations[d], r_hint)
            if not keep_steps:
                continue
            pending[t] = h
            group = t // size
            members = range(group * size, min((group + 1) * size, self.steps))
            if all(m in pending for m in members):
                groups[group] = self.stacked([pending.pop(m) for m in members])
        return [groups[g] for g in sorted(groups)], h, c

    def stacked(self, parts: list[str], axis: int | None = None, shape: tuple[int, ...] | None = None,
                out: str | None = None) -> str:
        """``parts`` stacked on ``axis`` (by default ``Y``'s time axis).  Parts ``[B, H]`` (steps'
        or directions' ``h``) are each of the stacked ``shape`` (by default one step of ``Y``):
        concatenated on rows in layout 0 and on columns in layout 1, which lays their elements
        out in that order, then one Reshape of the whole (a copy), not one a part."""
        b = self.b
        axis = (0 if self.layout == 0 else 1) if axis is None else axis
        if shape is None and any(len(b.types[p].dims) != 2 for p in parts):      # groups of steps
            if len(parts) == 1:
                if out is not None:
                    b.values[out] = parts[0]
                return parts[0]
            return b.op("Concat", parts, {"axis": axis}, out=out)
        shape = list(shape or ((1, 1, self.batch, self.hidden) if self.layout == 0
                               else (self.batch, 1, 1, self.hidden)))
        shape[axis] *= len(parts)
        joined = parts[0] if len(parts) == 1 else b.op("Concat", parts, {"axis": self.layout})
        return b.op("Reshape", [joined], {"shape": tuple(shape)}, out=out)

    def build(self) -> None:
        node, batch, hid = self.node, self.batch, self.hidden
        y = _output(node, 0)
        results = [self.direction(d, y is not None) for d in range(self.directions)]
        if y is not None:
            per_dir = [self.stacked(groups, out=None if self.directions > 1 else y) for groups, _, _ in results]
            if self.directions > 1:
                self.b.op("Concat", per_dir, {"axis": 1 if self.layout == 0 else 2}, out=y)
        for index, pick in ((1, 1), (2, 2)):
            name = _output(node, index)
            if name is None:
                continue
            if index == 2 and self.kind != "LSTM":
                raise self.b.error(f"{self.kind} has no output {index}")
            shape, axis = ((1, batch, hid), 0) if self.layout == 0 else ((batch, 1, hid), 1)
            self.stacked([r[pick] for r in results], axis, shape, name)


def _recurrent(b, node, attrs):
    _Unroller(b, node, attrs).build()


RNN_CONVERTERS = {"LSTM": _recurrent, "GRU": _recurrent, "RNN": _recurrent}
