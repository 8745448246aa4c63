"""The zoo's CRNN text recognizer (``zoo.crnn``: conv-BN-ReLU layers and max pools, the
columns as a sequence, two bidirectional LSTM layers, a Linear head, LogSoftmax) compiled
and simulated in f16, at a test size (10 steps, hidden 32), its sequence features and
each LSTM layer's output made outputs too.

Tolerance.  A bound carried through the whole network is vacuous: measured on this model,
the first-order elementwise bound grows about 20-fold through each 3x3 convolution (the
L1 norm of a weight row, ``9 C`` He-scaled weights) and, through the recurrence, by
``|R|``'s row sums times the gates' slopes per step (about 1.6 at hidden 64, so a 26-step
bound passes 10^5 and, once it reaches O(1), the slopes' intervals open and it diverges).
The real errors are independent roundings and do not compound so.  So each stage is
checked against its exact result computed from the values vpuc itself gave the stage:

- the recurrent stages (each LSTM layer fed vpuc's output of the stage before, the head
  fed vpuc's second LSTM output) against their float64 evaluation, within the bound
  ``rnn_bound.py`` derives step by step for vpuc's f16 roundings (10 steps of hidden 32:
  a bound about a fifth of the values, not vacuous), the head's MatMul and bias as there,
  and LogSoftmax ``z - lse(z)``: ``e_z + max e_z`` (lse is 1-Lipschitz in the max norm),
  its f32 evaluation ``gamma_(K+3)(f32) (max |z| + |y|)`` and its f16 store ``u |y|``;
- every layer (the convolutions, each unrolled step's ops) against vpuc's f16 graph
  reference fed its simulated inputs, within ``runtime_sim/layer_check.py``'s derived
  per-layer bound (``--reference``);
- end to end, the features and the log-probabilities against onnxruntime within the
  whole-model tolerance of ``test_import_models.py`` (cosine >= 0.999, max |diff| <= 1%
  of the output's range), which is how a drift made of independent roundings looks.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from onnx_testlib import assert_within, rounded_to_f16
from rnn_bound import Rounding, Tracked, rnn_bound
from tests.tolerances import gamma
from vpuc import api
from vpuc.onnx_import.zoo import crnn

U16 = 2.0 ** -11
SIZE = {"width": 40, "hidden": 32, "classes": 11}


def _lstm(r: Rounding, x: Tracked, w, rr, bias) -> Tracked:
    """A bidirectional LSTM's Y ``[T, 2, B, H]`` (zero initial states) as a Tracked value."""
    acts = [("sigmoid", None, None), ("tanh", None, None), ("tanh", None, None)]
    ys = []
    for d in range(2):
        xv, xe = (x.v, x.e) if d == 0 else (x.v[::-1], x.e[::-1])
        steps, _ = rnn_bound(r, "LSTM", xv, w[d], rr[d], bias[d].copy(), None, None, acts, False, xe)
        v, e = np.stack([s.v for s in steps]), np.stack([s.e for s in steps])
        ys.append((v, e) if d == 0 else (v[::-1], e[::-1]))
    return Tracked(np.stack([y[0] for y in ys], 1), np.stack([y[1] for y in ys], 1))


def _logsoftmax(r: Rounding, z: Tracked) -> Tracked:
    y = z.v - np.log(np.exp(z.v).sum(-1, keepdims=True))
    classes = z.v.shape[-1]
    e = (z.e + z.e.max(-1, keepdims=True) + r.u * np.abs(y)
         + gamma(classes + 3, np.float32) * (np.abs(z.v).max(-1, keepdims=True) + np.abs(y)))
    return Tracked(y, e)


def _whole_model_close(got, want, what) -> None:
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999, (what, cosine)
    assert np.abs(got - want).max() <= 0.01 * np.ptp(want), (what, np.abs(got - want).max(), np.ptp(want))


def test_crnn_stages(tmp_path):
    builder = crnn(**SIZE)
    nodes = list(builder.nodes)
    lstms = [k for k, n in enumerate(nodes) if n.op_type == "LSTM"]
    features = nodes[lstms[0] - 1].output[0]                      # the Transpose to [T, 1, C]
    merged = [nodes[k + 2].output[0] for k in lstms]              # each layer's [T, 1, 2H]
    final = builder.outputs[0].name
    for name in [features, *merged]:
        builder.output(name)
    model = builder.model("crnn")
    path = rounded_to_f16(model, None)
    onnx.save(path, str(tmp_path / "crnn16.onnx"))
    inits = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in path.graph.initializer}
    image = np.random.default_rng(5).standard_normal((1, 1, 32, SIZE["width"])).astype(np.float16)

    sim = api.simulate(api.compile(str(tmp_path / "crnn16.onnx")), {"image": image}, reference=True)
    assert not sim.layer_check.failed, sim.layer_check.summary()
    got = {name: sim.outputs[name].astype(np.float64) for name in (features, *merged, final)}
    session = ort.InferenceSession(str(tmp_path / "crnn16.onnx"), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()],
                    session.run(None, {"image": image.astype(np.float32)})))
    _whole_model_close(got[features], want[features], "features")
    _whole_model_close(got[final], want[final].astype(np.float64), "log-probabilities")

    r = Rounding(U16)
    stage_input = got[features]
    for k, out in zip(lstms, merged):
        y = _lstm(r, Tracked(stage_input), *(inits[n] for n in nodes[k].input[1:4]))
        shape = got[out].shape
        exact = y.v.transpose(0, 2, 1, 3).reshape(shape)
        bound = y.e.transpose(0, 2, 1, 3).reshape(shape)
        assert_within(got[out], exact, bound + 2.0 ** -25, out)
        assert np.median(bound) < 0.05 * np.ptp(exact), out             # not vacuous
        stage_input = got[out]
    matmul, add = nodes[-3], nodes[-2]
    logits = r.add(r.matmul(Tracked(stage_input), inits[matmul.input[1]]), Tracked(inits[add.input[1]]))
    out = _logsoftmax(r, logits)
    assert_within(got[final], out.v, out.e + 2.0 ** -25, "log-probabilities")
    assert np.median(out.e) < 0.05 * np.ptp(out.v)                     # not vacuous
