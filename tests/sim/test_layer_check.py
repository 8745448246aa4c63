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
