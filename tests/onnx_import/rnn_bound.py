"""The error bound of an LSTM, GRU or RNN evaluated with rounding unit u, step by step.

Both sides of a comparison get the same f16-exact input, weights and initial states, so
each is off the exact result only by its own roundings.  This evaluates the cell in
float64 beside an absolute error bound per element, first order in the roundings:

- a matmul ``a @ W`` (W exact): ``e_a @ |W| + gamma_n(f32) |a| @ |W| + u |v|`` (an f32
  sum of n terms, Higham's (3.5), stored once);
- ``a + b``, ``a - b``: ``e_a + e_b + u |v|``; ``a * b``: ``|a| e_b + |b| e_a + e_a e_b + u |v|``;
  ``a / b`` (``|b| >= 1``): ``(e_a + |v| e_b) / (|b| - e_b) + u |v|``;
- an activation ``f``: ``L e_a + u |v|`` with L the largest ``|f'|`` on ``[a - e_a, a + e_a]``
  (the mean value theorem; sigmoid's ``s (1 - s)`` and tanh's ``1 - t^2`` at the point of
  the interval nearest 0), the kernel computing in f32 and storing once;
- a constant vpuc folds at import (``Wb + Rb``) is stored once: ``u |Wb + Rb|``.

Through T steps the recurrence carries each step's error into the next by ``|R|`` times the
gates' slopes; the bound follows it rather than assuming a contraction.  onnxruntime's side
is the same evaluation with u = 2^-24, times 4 for its different operation order and its
polynomial sigmoid and tanh (MLAS), both far below f16's u = 2^-11.
"""

from __future__ import annotations

import numpy as np

from tests.tolerances import gamma


class Tracked:
    """A value and the bound on its error."""

    def __init__(self, v, e=0.0) -> None:
        self.v = np.asarray(v, np.float64)
        self.e = np.broadcast_to(np.asarray(e, np.float64), self.v.shape).copy()


class Rounding:
    def __init__(self, u: float) -> None:
        self.u = u

    def out(self, v, e) -> Tracked:
        return Tracked(v, e + self.u * np.abs(v))

    def matmul(self, a: Tracked, w: np.ndarray) -> Tracked:
        aw = np.abs(w)
        v = a.v @ w
        return self.out(v, a.e @ aw + gamma(w.shape[0], np.float32) * (np.abs(a.v) @ aw))

    def add(self, a: Tracked, b: Tracked) -> Tracked:
        return self.out(a.v + b.v, a.e + b.e)

    def sub(self, a: Tracked, b: Tracked) -> Tracked:
        return self.out(a.v - b.v, a.e + b.e)

    def mul(self, a: Tracked, b: Tracked) -> Tracked:
        return self.out(a.v * b.v, np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e)

    def div(self, a: Tracked, b: Tracked) -> Tracked:
        v = a.v / b.v
        return self.out(v, (a.e + np.abs(v) * b.e) / (np.abs(b.v) - b.e))

    def const(self, value) -> Tracked:
        return Tracked(value)

    def act(self, name: str, a: Tracked, alpha=None, beta=None) -> Tracked:
        nearest = np.where((a.v - a.e <= 0) & (a.v + a.e >= 0), 0.0,
                           np.minimum(np.abs(a.v - a.e), np.abs(a.v + a.e)))
        if name == "sigmoid":
            s = 1 / (1 + np.exp(-nearest))
            return self.out(1 / (1 + np.exp(-a.v)), s * (1 - s) * a.e)
        if name == "tanh":
            return self.out(np.tanh(a.v), (1 - np.tanh(nearest) ** 2) * a.e)
        if name == "relu":
            return Tracked(np.maximum(a.v, 0), a.e)
        if name == "softplus":
            return self.out(np.logaddexp(0, a.v), a.e)
        if name == "elu":
            slope = np.maximum(1.0, alpha * np.exp(a.v + a.e))
            return self.out(np.where(a.v > 0, a.v, alpha * np.expm1(a.v)), slope * a.e)
        if name == "softsign":
            return self.div(a, self.add(Tracked(np.abs(a.v), a.e), self.const(1.0)))
        if name == "leakyrelu":
            scaled = self.mul(a, self.const(alpha))
            return Tracked(np.maximum(a.v, scaled.v), np.maximum(a.e, scaled.e))
        if name == "scaledtanh":
            return self.mul(self.act("tanh", self.mul(a, self.const(beta))), self.const(alpha))
        affine = self.add(self.mul(a, self.const(alpha)), self.const(beta))
        if name == "affine":
            return affine
        assert name == "hardsigmoid", name
        return Tracked(np.clip(affine.v, 0, 1), affine.e)


def columns(a: Tracked, begin: int, end: int) -> Tracked:
    return Tracked(a.v[:, begin:end], a.e[:, begin:end])


def rnn_bound(r: Rounding, kind: str, x, w, rr, bias, h0, c0, acts, linear_before_reset: bool, x_err=0.0):
    """One direction (``x`` in its processing order ``[T, B, I]``, off by at most ``x_err``):
    each step's ``h`` and the last ``c`` as Tracked values.  ``acts``: (name, alpha, beta)
    per activation."""
    hidden = rr.shape[1]
    rows = w.shape[0]
    f = lambda a, k: r.act(acts[k][0], a, acts[k][1], acts[k][2])
    folded = bias[:rows] + bias[rows:]
    if linear_before_reset:
        folded[2 * hidden:] = bias[2 * hidden:rows]
    bias_t = Tracked(folded, r.u * np.abs(folded))
    h = None if h0 is None or not np.any(h0) else Tracked(h0)
    c = None if c0 is None or not np.any(c0) else Tracked(c0)
    hs = []
    for xt, et in zip(x, np.broadcast_to(x_err, np.shape(x))):
        p = r.add(r.matmul(Tracked(xt, et), w.T), bias_t)
        if kind == "RNN":
            h = f(p if h is None else r.add(p, r.matmul(h, rr.T)), 0)
        elif kind == "LSTM":
            gates = p if h is None else r.add(p, r.matmul(h, rr.T))
            sig, cand = f(columns(gates, 0, 3 * hidden), 0), f(columns(gates, 3 * hidden, 4 * hidden), 1)
            i, o, fg = (columns(sig, k * hidden, (k + 1) * hidden) for k in range(3))
            new_c = r.mul(i, cand)
            c = new_c if c is None else r.add(r.mul(fg, c), new_c)
            h = r.mul(o, f(c, 2))
        else:
            h = _gru_step(r, f, p, h, rr, bias, hidden, linear_before_reset)
        hs.append(h)
    return hs, c


def _gru_step(r, f, p, h, rr, bias, hidden, linear_before_reset):
    rows = 3 * hidden
    rbh = r.const(bias[rows + 2 * hidden:])
    if h is None:
        zr = f(columns(p, 0, 2 * hidden), 0)
        reset = r.mul(columns(zr, hidden, 2 * hidden), rbh) if linear_before_reset else None
    elif linear_before_reset:
        q = r.matmul(h, rr.T)
        zr = f(r.add(columns(p, 0, 2 * hidden), columns(q, 0, 2 * hidden)), 0)
        reset = r.mul(columns(zr, hidden, 2 * hidden), r.add(columns(q, 2 * hidden, rows), rbh))
    else:
        zr = f(r.add(columns(p, 0, 2 * hidden), r.matmul(h, rr[:2 * hidden].T)), 0)
        reset = r.matmul(r.mul(columns(zr, hidden, 2 * hidden), h), rr[2 * hidden:].T)
    z = columns(zr, 0, hidden)
    cand_in = columns(p, 2 * hidden, rows)
    cand = f(cand_in if reset is None else r.add(cand_in, reset), 1)
    if h is None:
        return r.sub(cand, r.mul(z, cand))
    return r.add(cand, r.mul(z, r.sub(h, cand)))
