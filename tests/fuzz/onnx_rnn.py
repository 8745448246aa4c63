"""Fuzz cases of the recurrent ops vpuc unrolls at import (vpuc/onnx_import/convert_rnn.py):
one LSTM, GRU or RNN node, the ``rnn`` family (``bench/onnx_fuzz.py --rnn N``).

Drawn: the op, its sizes (1 to 7 steps, batch 1 to 3, 1 to 12 inputs, hidden 1 to 12),
the direction, biases present or not, a constant initial state (and cell) or none, a
constant ``sequence_lens`` of the full length or none, GRU's ``linear_before_reset``,
the activations (the defaults, or others vpuc has, with ``activation_alpha`` / ``beta``
given or left to their defaults), which one output the model reads (Y, Y_h or LSTM's
Y_c), and the opset, from 7 to 23.  ``layout = 1`` is left out: onnxruntime refuses it
(``tests/onnx_import/test_rnn_ops.py`` checks it between Transposes).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.fuzz import onnx_forms as forms

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
PER_DIRECTION = {"LSTM": 3, "GRU": 2, "RNN": 1}
# activations vpuc has, and how many of alpha, beta each takes
ACTIVATIONS = {"Sigmoid": 0, "Tanh": 0, "Relu": 0, "HardSigmoid": 2, "LeakyRelu": 1, "Affine": 2,
               "ScaledTanh": 2, "Elu": 1, "Softsign": 0, "Softplus": 0}
# bounded ones for LSTM's and GRU's gates (an unbounded gate grows the state step by step)
GATE_ACTIVATIONS = ("Sigmoid", "HardSigmoid", "Tanh", "Softsign")


def _activations(m, kind: str, directions: int) -> dict:
    r = m.rng
    if r.random() < 0.5:
        return {}
    names = []
    for _ in range(directions):
        for k in range(PER_DIRECTION[kind]):
            names.append(r.choice(GATE_ACTIVATIONS if kind != "RNN" and k == 0 else sorted(ACTIVATIONS)))
    attrs = {"activations": names}
    wanted = sum(ACTIVATIONS[n] > 0 for n in names)
    if wanted and r.random() < 0.5:
        attrs["activation_alpha"] = [round(r.uniform(0.05, 0.9), 3) for _ in range(wanted)]
        if any(ACTIVATIONS[n] > 1 for n in names):
            attrs["activation_beta"] = [round(r.uniform(0.1, 1.2), 3)
                                        for n in names if ACTIVATIONS[n] > 1]
    return attrs


def rnn_case(m):
    r = m.rng
    kind = r.choice(sorted(GATES))
    m.opset = forms.draw_opset(m, 7)
    steps, batch, inputs, hidden = r.randint(1, 7), r.randint(1, 3), r.randint(1, 12), r.randint(1, 12)
    direction = r.choice(["forward", "reverse", "bidirectional"])
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[kind]
    ins = ["x", m.weight((dirs, gates * hidden, inputs), inputs), m.weight((dirs, gates * hidden, hidden), hidden),
           m.weight((dirs, 2 * gates * hidden), 4) if r.random() < 0.7 else ""]
    ins.append(m.init(np.full(batch, steps, np.int32)) if r.random() < 0.2 else "")
    if r.random() < 0.5:
        ins.append(m.weight((dirs, batch, hidden), 2))
        if kind == "LSTM" and r.random() < 0.7:
            ins.append(m.weight((dirs, batch, hidden), 2))
    while ins[-1] == "":
        ins.pop()
    attrs = dict(_activations(m, kind, dirs), hidden_size=hidden, direction=direction)
    if kind == "GRU" and r.random() < 0.5:
        attrs["linear_before_reset"] = 1
    read = r.randint(0, 2 if kind == "LSTM" else 1)
    outs = [f"y{k}" if k == read else "" for k in range(read + 1)]
    m.nodes.append(helper.make_node(kind, ins, outs, **attrs))
    return m.model([steps, batch, inputs], outs[read])

