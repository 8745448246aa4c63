"""``--reference`` on a model: each layer against the f16 graph reference fed with the
inputs the simulation gave it (runtime_sim/layer_check.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runtime_sim.layer_check import check_layers
from tests.sim.simlib import run_cli
from tests.sim.test_node_report import small_cnn
from vpuc import api


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    model = small_cnn(tmp_path_factory.mktemp("m") / "m.onnx")
    program = api.compile(model)
    return program, api.simulate(program, reference=True, seed=3)


def test_every_layer_is_within_the_bound(run):
    program, sim = run
    check = sim.layer_check
    assert check is not None and not check.failed
    # Every layer that writes a value to DDR is checked, each under its ONNX nodes.
    checked = {r.layer for r in check.layers}
    assert checked and checked <= {layer.key for layer in program.module.layers}
    assert all(r.nodes and r.values and r.elements for r in check.layers)
    assert 0 < check.worst_fraction <= 1


def test_an_error_is_caught_at_the_layer_that_makes_it(run, monkeypatch):
    """One op computed 1% off (here: the reference's MaxPool, as a wrong simulated MaxPool
    would be seen): its layer fails, and the layers after it, fed with the simulated
    values, do not inherit the error."""
    import runtime_sim.layer_check as layer_check
    program, sim = run
    exact = layer_check.run_op

    def off(op, args, *rest):
        out = exact(op, args, *rest)
        return (out.astype(np.float32) * 1.01 + 0.01).astype(out.dtype) \
            if op.kind == "MaxPool" else out

    monkeypatch.setattr(layer_check, "run_op", off)
    check = check_layers(program, sim.result.network, program.source_graph)
    baseline = {r.layer: r for r in sim.layer_check.layers}
    assert [r.op_types for r in check.failed] == ["MaxPool"]
    for r in check.layers:
        assert r.elements == baseline[r.layer].elements
        if "MaxPool" not in r.op_types:
            assert r.failures == 0


def test_run_json_reports_each_layer(tmp_path, capsys, monkeypatch):
    model = small_cnn(tmp_path / "m.onnx")
    code, stdout, err = run_cli(["run", model, "--reference", "--json"], capsys, monkeypatch)
    assert code == 0, err
    data = json.loads(stdout)["layer_check"]
    assert data["layers_failed"] == 0 and data["layers_checked"] == len(data["layers"]) > 0
    assert {"layer", "onnx_nodes", "onnx_op_types", "values", "elements", "failures",
            "worst_fraction", "worst_value"} == set(data["layers"][0])


def test_a_blob_has_no_graph_to_check(run, tmp_path):
    program, _ = run
    back = api.read_blob(api.write_blob(program))
    assert back.source_graph is None
    assert api.simulate(back, reference=True).layer_check is None


@pytest.fixture(scope="module")
def resident(tmp_path_factory):
    """MobileNetV3-Small at the tests' size: values kept in CMX between segments, some
    written in place by DPU tasks (``resident.in_place_blocks``), some held with padded
    channels (72 -> 80, 88 -> 96: ``resident.padded_channels``)."""
    from vpuc.onnx_import.zoo import mobilenet_v3_small
    path = mobilenet_v3_small(size=32, classes=10).save(tmp_path_factory.mktemp("r") / "m.onnx",
                                                         "m")
    program = api.compile(path)
    return program, api.simulate(program, reference=True, seed=3)


def test_values_kept_in_cmx_are_checked_as_their_last_writer_left_them(resident, monkeypatch):
    """Every layer is checked and none fails: a value a DPU task writes in place is read as
    that task left it, not as the DMA before it did (the stale copy failed
    batchnormalization_19's and sg1's layers on hundreds of elements), and a value held with
    padded channels is compared on its real ones (they were skipped: 63 of 75 layers)."""
    import runtime_sim.layer_check as layer_check
    from runtime_sim.kept_values import value_buffer
    from vpuc.ir.module import BufferKind
    from vpuc.ir.symbols import SymbolTable
    from vpuc.ir.tasks import DpuTask
    program, sim = resident
    check, network = sim.layer_check, sim.result.network
    assert not check.failed, [(r.layer, r.failures) for r in check.failed]
    # 72 since the import folds each squeeze-excite HardSigmoid into its 1x1 (onnx_import.fold),
    # 71 since the flatten before the first Gemm folds into its load (fold_views), 70 since
    # the squeeze-excite product on the 8 x 8 map folds into its projection's weights
    # (lower_dpu_scale_weights: one layer of the Mul, the Conv and its BatchNormalization),
    # 65 since choose_fold prices the product as its whole segment: six products fold at
    # this size, the blocks of 8 x 8, 4 x 4 and 2 x 2 maps (one layer fewer each)
    assert len(check.layers) == len(program.module.layers) == 65
    ops = {value_buffer(op.result): op for op in program.source_graph.ops if op.result}
    values = {b.name: b for b in program.module.buffers
              if b.kind is BufferKind.CMX and b.name in ops}
    assert set(values) <= set(network.kept)
    symbols = SymbolTable(program.module)
    in_place = {symbols.region(t.output).root.name for tl in program.module.task_lists
                for t in tl.tasks if isinstance(t, DpuTask)} & set(values)
    assert in_place                     # DPU tasks write some values in place
    compared = {}
    exact = layer_check._compare

    def spy(result, name, got, *rest):
        compared[name] = np.shape(got)
        exact(result, name, got, *rest)

    monkeypatch.setattr(layer_check, "_compare", spy)
    again = check_layers(program, network, program.source_graph)
    assert [r.as_dict() for r in again.layers] == [r.as_dict() for r in check.layers]
    # every value kept in CMX is compared; the padded ones on their real channels
    assert {value_buffer(v) for v in compared} >= set(values)
    padded = {v for v, shape in compared.items() if value_buffer(v) in values
              and network.kept[value_buffer(v)].shape[1] > shape[1]}
    assert len(padded) >= 2, padded


def test_the_bound_carries_the_references_rounding_of_large_intermediates():
    """A convolution channel of outputs near 48 that a batch norm's bias brings back near 0
    (MobileNetV3's %hardswish_179 at full size): the reference rounds the convolution's
    output to f16 (half an ulp there: 2^-6) before the add, the DPU rounds once after it.
    The error is then far more than ulps of the small output; the bound's ``I`` term (the
    chain's intermediate magnitudes, per element) covers it, and only it."""
    import runtime_sim.layer_check as layer_check
    rng = np.random.default_rng(0)
    conv = rng.uniform(47.5, 48.5, (1, 4, 8, 8)).astype(np.float32)   # f32 accumulations
    bias = np.float32(-48.0)
    sim = (conv + bias).astype(np.float16)                  # one rounding, after the add
    rounded = conv.astype(np.float16)                        # the reference's two
    ref = {"conv": rounded, "bn": (rounded.astype(np.float32) + bias).astype(np.float16)}
    # |bn| < 0.5 (ulp <= 2^-12): the two differ by 8 output ulps and more
    assert np.max(np.abs(sim.astype(np.float64) - ref["bn"])) > 2.0 ** -9

    def check(inter):
        result = layer_check.LayerResult("bn", "", "")
        layer_check._compare(result, "bn", sim, ref["bn"], 2, 0, 0.0, inter)
        return result

    inter = layer_check._intermediates(["conv"], ref, {}, ref["bn"].shape)
    assert np.shape(inter) == ref["bn"].shape                # per element, elementwise chain
    assert check(0.0).failures > 0                          # without it: a false failure
    assert check(inter).failures == 0
    # the bound stays an ulp-scale one: 0.1 off (6 half-ulps of 48) still fails
    assert check(inter).worst_fraction < 0.5
    off = layer_check.LayerResult("bn", "", "")
    layer_check._compare(off, "bn", (sim.astype(np.float32) + 0.1).astype(np.float16),
                         ref["bn"], 2, 0, 0.0, inter)
    assert off.failures > 0
