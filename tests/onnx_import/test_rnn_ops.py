"""LSTM, GRU and RNN (vpuc/onnx_import/convert_rnn.py): their import (golden text of a tiny
LSTM), the shapes they infer against ONNX's shape inference, the graph's size as the
sequence grows, their refusals, and their numerics against onnxruntime, compiled and
simulated in f16, within the bound ``rnn_bound.py`` derives step by step (f16 roundings
on vpuc's side, f32 on onnxruntime's, carried through the recurrence).

onnxruntime refuses ``layout = 1``; those cases are compared with the layout-0 node
between Transposes (the spec defines layout 1 as exactly that).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from onnx_testlib import assert_within, rounded_to_f16
from rnn_bound import Rounding, rnn_bound
from vpuc import api
from vpuc.onnx_import import import_onnx
from vpuc.diagnostics import VpucError
from vpuc.onnx_import.convert_rnn import ACTIVATION_PARAMS, DEFAULT_ACTIVATIONS, GATES
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16, U32 = 2.0 ** -11, 2.0 ** -24

# case: kind, direction, layout, initial states ("const", "input" or None), biases, attributes
CASES = {
    "lstm_forward": ("LSTM", "forward", 0, None, True, {}),
    "lstm_reverse_init": ("LSTM", "reverse", 0, "const", True, {}),
    "lstm_bidirectional": ("LSTM", "bidirectional", 0, "input", True, {}),
    "lstm_no_bias": ("LSTM", "forward", 0, "const", False, {}),
    "lstm_layout1_bidirectional": ("LSTM", "bidirectional", 1, "const", True, {}),
    "lstm_activations": ("LSTM", "forward", 0, "const", True, {
        "activations": ["HardSigmoid", "Relu", "ScaledTanh"], "activation_alpha": [0.3, 0.8],
        "activation_beta": [0.45, 1.2]}),
    "gru_forward": ("GRU", "forward", 0, None, True, {}),
    "gru_reverse_init": ("GRU", "reverse", 0, "const", True, {}),
    "gru_bidirectional_lbr": ("GRU", "bidirectional", 0, "input", True, {"linear_before_reset": 1}),
    "gru_lbr_first_step": ("GRU", "forward", 0, None, True, {"linear_before_reset": 1}),
    "gru_no_bias": ("GRU", "reverse", 0, "const", False, {}),
    "gru_layout1": ("GRU", "forward", 1, "const", True, {"linear_before_reset": 1}),
    "gru_activations": ("GRU", "forward", 0, "const", True, {
        "activations": ["HardSigmoid", "Softsign"]}),
    "rnn_forward": ("RNN", "forward", 0, None, True, {}),
    "rnn_bidirectional_init": ("RNN", "bidirectional", 0, "const", True, {}),
    "rnn_layout1_reverse": ("RNN", "reverse", 1, "input", False, {}),
    "rnn_activations": ("RNN", "bidirectional", 0, None, True, {
        "activations": ["Relu", "LeakyRelu"], "activation_alpha": [0.2]}),
    "rnn_elu_softplus": ("RNN", "bidirectional", 0, None, True, {
        "activations": ["Elu", "Softplus"]}),
    "rnn_affine": ("RNN", "forward", 0, "const", True, {
        "activations": ["Affine"], "activation_alpha": [0.5], "activation_beta": [0.1]}),
}
STEPS, BATCH, INPUTS, HIDDEN = 5, 2, 8, 6
# the golden import text of the smallest forms
GOLDEN_CASES = ("lstm_forward", "gru_bidirectional_lbr", "rnn_layout1_reverse")


def _build(case, opset=17, layout_for_ort=None, steps=STEPS, outputs=None):
    """The case's model; ``layout_for_ort=0`` writes a layout-1 case as onnxruntime takes it:
    the layout-0 node between Transposes, with the same weights."""
    kind, direction, layout, initial, biased, attrs = CASES[case]
    m = ModelBuilder(seed=sum(map(ord, case)), opset=opset)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[kind]
    inner = layout if layout_for_ort is None else layout_for_ort
    x = m.input("x", [steps, BATCH, INPUTS] if layout == 0 else [BATCH, steps, INPUTS])
    state = (dirs, BATCH, HIDDEN) if layout == 0 else (BATCH, dirs, HIDDEN)
    ins = [x, m.weight((dirs, gates * HIDDEN, INPUTS)), m.weight((dirs, gates * HIDDEN, HIDDEN)),
           m.weight((dirs, 2 * gates * HIDDEN), 0.3) if biased else ""]
    if initial:
        ins.append("")
        for k in range(2 if kind == "LSTM" else 1):
            ins.append(m.input(f"h{k}", list(state)) if initial == "input" else m.weight(state, 0.5))
    swap = layout == 1 and inner == 0
    if swap:
        ins[0] = m.node("Transpose", [x], perm=[1, 0, 2])
        ins[5:] = [m.node("Transpose", [s], perm=[1, 0, 2]) for s in ins[5:]]
    names = [f"y{k}" for k in range(3 if kind == "LSTM" else 2)]
    wanted = names if outputs is None else [n if k in outputs else "" for k, n in enumerate(names)]
    node_attrs = dict(attrs, hidden_size=HIDDEN, direction=direction)
    if inner:
        node_attrs["layout"] = 1
    made = [n + ".raw" if (swap and n) else n for n in wanted]
    m.nodes.append(helper.make_node(kind, ins, made, name=f"{kind.lower()}_node", **node_attrs))
    for name, raw, k in zip(wanted, made, range(3)):
        if not name:
            continue
        if swap:
            m.nodes.append(helper.make_node("Transpose", [raw], [name], perm=[2, 0, 1, 3] if k == 0 else [1, 0, 2]))
        m.output(name)
    return m


def _saved(tmp_path, case, **kw) -> str:
    model = _build(case, **kw).model(case)
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / f"{case}{kw.get('layout_for_ort', '')}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _feeds(path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float16)
            for i in onnx.load(path).graph.input}


def _acts(kind, attrs, dirs):
    names = list(attrs.get("activations") or DEFAULT_ACTIVATIONS[kind] * dirs)
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    out = []
    for name in names:
        alpha, beta = ACTIVATION_PARAMS[name.lower()]
        alpha = alphas.pop(0) if alpha is not None and alphas else alpha
        beta = betas.pop(0) if beta is not None and betas else beta
        out.append((name.lower(), alpha, beta))
    return out


def _bounds(case, path, feeds, u) -> list[np.ndarray]:
    """The error bound of Y, Y_h (and Y_c) for rounding unit ``u``, in the outputs' layout."""
    kind, direction, layout, initial, _, attrs = CASES[case]
    model = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == kind)
    value = lambda name: inits[name] if name in inits else feeds[name].astype(np.float64)
    x = value("x") if layout == 0 else value("x").transpose(1, 0, 2)
    w, rr = inits[node.input[1]], inits[node.input[2]]
    dirs = w.shape[0]
    bias = inits[node.input[3]] if node.input[3] else np.zeros((dirs, 2 * w.shape[1]))
    states = [value(n) if layout == 0 else value(n).transpose(1, 0, 2) for n in node.input[5:]]
    acts = _acts(kind, attrs, dirs)
    per = len(DEFAULT_ACTIVATIONS[kind])
    ys, hs, cs = [], [], []
    for d in range(dirs):
        backward = direction == "reverse" or d == 1
        xd = x[::-1] if backward else x
        h0 = states[0][d] if states else None
        c0 = states[1][d] if len(states) > 1 else None
        steps, c = rnn_bound(Rounding(u), kind, xd, w[d], rr[d], bias[d].copy(), h0, c0,
                             acts[d * per:(d + 1) * per], bool(attrs.get("linear_before_reset", 0)))
        errors = np.stack([s.e for s in steps])
        ys.append(errors[::-1] if backward else errors)
        hs.append(steps[-1].e)
        cs.append(c.e if c is not None else None)
    y = np.stack(ys, axis=1)                        # [T, D, B, H]
    out = [y, np.stack(hs)] + ([np.stack(cs)] if kind == "LSTM" else [])
    if layout == 1:
        out = [out[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in out[1:]]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_against_onnxruntime(case, tmp_path):
    path = rounded_to_f16(_saved(tmp_path, case), tmp_path / "r16.onnx")
    ort_path = rounded_to_f16(_saved(tmp_path, case, layout_for_ort=0), tmp_path / "ort16.onnx") \
        if CASES[case][2] == 1 else path
    feeds = _feeds(path)
    want = ort.InferenceSession(ort_path, providers=["CPUExecutionProvider"]).run(
        None, {k: v.astype(np.float32) for k, v in feeds.items()})
    got = api.simulate(api.compile(path), feeds).outputs
    bounds = [a + 4 * b for a, b in zip(_bounds(case, path, feeds, U16), _bounds(case, path, feeds, U32))]
    assert len(got) == len(want)
    for (name, g), w, bound in zip(got.items(), want, bounds):
        assert_within(g.astype(np.float64), w.astype(np.float64), bound + 2.0 ** -25, f"{case} {name}")


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_import_text(case, tmp_path):
    text = print_module(import_onnx(_saved(tmp_path, case, steps=2), precision="f32").module)
    golden = GOLDEN / f"rnn_{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_shapes_agree_with_onnx_inference(case, tmp_path):
    path = _saved(tmp_path, case)
    imported = import_onnx(path, precision="f16")
    types = {op.result: op.type for op in imported.module.graphs[0].ops if op.result}
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True).graph.output
    for info, result in zip(inferred, imported.outputs.values()):
        assert tuple(types[result].dims) == tuple(d.dim_value for d in info.type.tensor_type.shape.dim)


def test_only_read_outputs_are_built(tmp_path):
    """Y_h alone: no Concat of the steps' h; still correct shape."""
    path = _saved(tmp_path, "lstm_bidirectional", outputs=(1,))
    ops = [op.kind for op in import_onnx(path, precision="f16").module.graphs[0].ops]
    assert ops.count("Concat") == 1           # the two directions' last h only


def test_graph_grows_linearly_with_the_sequence(tmp_path):
    """A 26-step bidirectional LSTM (CRNN's sequence): one input-projection MatMul per
    direction, one recurrent MatMul per step after the first, and a fixed number of
    ops per step; R^T is stored once per direction."""
    counts = {}
    for steps in (13, 26):
        start = time.perf_counter()
        graph = import_onnx(_saved(tmp_path, "lstm_bidirectional", steps=steps), precision="f16").module.graphs[0]
        counts[steps] = [op.kind for op in graph.ops]
        assert time.perf_counter() - start < 20
    ops26 = counts[26]
    assert ops26.count("MatMul") == 2 + 2 * 26          # projection + 26 steps (h0 given) per direction
    assert ops26.count("Constant") == len([op for op in counts[13] if op == "Constant"])
    per_step = (len(ops26) - len(counts[13])) / (2 * 13)
    assert per_step <= 20, per_step


REFUSED = {
    "clip": ({"clip": 3.0}, None, "clip=3.0"),
    "input_forget": ({"input_forget": 1}, None, "input_forget"),
    "activation": ({"activations": ["Sigmoid", "Tanh", "Gelu"]}, None, "activation Gelu"),
    # refused by the LSTM, or before it while vpuc takes no integer inputs: either names 'lens'
    "run_time_lengths": ({}, "input", "'lens'"),
    "short_lengths": ({}, [STEPS, STEPS - 1], "not all the sequence length"),
    "peepholes": ({}, "peepholes", "peephole"),
    "initial_shape": ({}, "initial", "initial state"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_refusals_name_the_node(what, tmp_path):
    attrs, lens, message = REFUSED[what]
    m = ModelBuilder(seed=3, opset=17)
    x = m.input("x", [STEPS, BATCH, INPUTS])
    ins = [x, m.weight((1, 4 * HIDDEN, INPUTS)), m.weight((1, 4 * HIDDEN, HIDDEN)), ""]
    if lens == "input":
        ins.append(m.input("lens", [BATCH], onnx.TensorProto.INT32))
    elif lens == "peepholes":
        ins += ["", "", "", m.weight((1, 3 * HIDDEN), 0.1)]
    elif lens == "initial":                # two directions' states for a forward LSTM
        ins += ["", m.weight((2, BATCH, HIDDEN), 0.5)]
    elif lens is not None:
        ins.append(m.init(np.asarray(lens, np.int32), "lens"))
    m.nodes.append(helper.make_node("LSTM", ins, ["y"], name="the_lstm", hidden_size=HIDDEN, **attrs))
    m.output("y")
    path = m.save(tmp_path / "m.onnx")
    with pytest.raises(VpucError) as err:
        import_onnx(path, precision="f16")
    named = "the_lstm" in str(err.value) or lens == "input"
    assert named and message in str(err.value), str(err.value)


def test_full_constant_sequence_lens_is_taken(tmp_path):
    m = ModelBuilder(seed=3, opset=17)
    x = m.input("x", [STEPS, BATCH, INPUTS])
    lens = m.init(np.full(BATCH, STEPS, np.int32), "lens")
    m.nodes.append(helper.make_node("GRU", [x, m.weight((1, 3 * HIDDEN, INPUTS)), m.weight((1, 3 * HIDDEN, HIDDEN)),
                                            "", lens], ["y"], name="gru", hidden_size=HIDDEN))
    m.output("y")
    graph = import_onnx(m.save(tmp_path / "m.onnx"), precision="f16").module.graphs[0]
    assert [op.kind for op in graph.ops].count("MatMul") == 1 + 2 * (STEPS - 1)
