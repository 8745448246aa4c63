"""What the importer refuses at the node instead of computing something else.

- Indices and axes out of ONNX's range: Python's ``%`` used to turn an out-of-range
  Gather index into another row (index 9 of 8 channels gathered channel 1) and
  Flatten's ``axis=-1`` into the rank; both imported and ran without a word.
- Each output a converter makes is checked against ONNX's own shape inference, so a
  converter bug stops at its node.
- An attribute set away from its default that no converter reads (``attribute_use.py``):
  a Resize's ``antialias`` or a BatchNormalization's ``training_mode`` was ignored."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.cli import main
from vpuc.onnx_import import convert_layers
from vpuc.onnx_import.zoo import ModelBuilder


def _save(tmp_path, build, name, opset=17):
    m = ModelBuilder(seed=0, opset=opset)
    m.output(build(m))
    return m.save(tmp_path / f"{name}.onnx", name)


def _import(capsys, model):
    code = main(["import", str(model)])
    out, err = capsys.readouterr()
    return code, out, err


def test_gather_index_out_of_range_names_the_node(tmp_path, capsys):
    model = _save(tmp_path, lambda m: m.node(
        "Gather", [m.input("x", [1, 8, 4, 4]), m.init(np.asarray([2, 9, -9], np.int64))], axis=1), "gather")
    code, out, err = _import(capsys, model)
    assert (code, out) == (1, "")
    assert err == (f"error: {model}: node 'Gather_3' (Gather, domain ai.onnx, opset 17): Gather "
                   "indices [9, -9] are out of range for axis 1 of size 8 (expected -8 to 7)\n")
    assert not (tmp_path / "gather.vir").exists()


def test_gather_negative_indices_in_range_count_from_the_back(tmp_path, capsys):
    model = _save(tmp_path, lambda m: m.node(
        "Gather", [m.input("x", [1, 8, 4, 4]), m.init(np.asarray([-8, -1], np.int64))], axis=-3), "gather")
    code, _, err = _import(capsys, model)
    assert (code, err) == (0, "")
    assert "Gather{axis = 1, indices = [0, 7]}" in (tmp_path / "gather.vir").read_text()


@pytest.mark.parametrize("axis, dims", [(-1, "24x2"), (-4, "1x48"), (0, "1x48"), (4, "48x1")])
def test_flatten_axis_over_its_whole_range(tmp_path, capsys, axis, dims):
    model = _save(tmp_path, lambda m: m.node("Flatten", [m.input("x", [1, 4, 6, 2])], axis=axis), "flat")
    code, _, err = _import(capsys, model)
    assert (code, err) == (0, "")
    assert f": {dims}xf16 NC from" in (tmp_path / "flat.vir").read_text()


def test_a_converter_shape_bug_stops_at_its_node(tmp_path, capsys, monkeypatch):
    """The old Flatten (axis % (rank + 1)) is caught by the check against ONNX's shapes."""
    def old_flatten(b, node, attrs):
        shape = b.shape(node.input[0])
        axis = attrs.get("axis", 1) % (len(shape) + 1)
        convert_layers._reshape_to(b, node, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
    monkeypatch.setitem(convert_layers.LAYER_CONVERTERS, "Flatten", old_flatten)
    model = _save(tmp_path, lambda m: m.node("Flatten", [m.input("x", [1, 4, 6, 2])], axis=-1), "flat")
    code, out, err = _import(capsys, model)
    assert (code, out) == (1, "")
    assert err == (f"error: {model}: node 'Flatten_2' (Flatten, domain ai.onnx, opset 17): output "
                   "'flatten_1' came out 48x1 but ONNX infers 24x2: vpuc converts this Flatten "
                   "wrongly (a bug; please report it with the model)\n")


def _resize(m, **attrs):
    return m.node("Resize", [m.input("x", [1, 2, 8, 8]), "", m.init(np.asarray([1, 1, 0.5, 0.5], np.float32))],
                  mode="linear", **attrs)


def test_an_attribute_no_converter_reads_is_refused(tmp_path, capsys):
    model = _save(tmp_path, lambda m: _resize(m, antialias=1), "resize", opset=18)
    code, out, err = _import(capsys, model)
    assert (code, out) == (1, "")
    assert err == (f"error: {model}: node 'Resize_3' (Resize, domain ai.onnx, opset 18): Resize attribute "
                   "antialias=1 is not supported (vpuc implements only its default, 0)\n")
    assert not (tmp_path / "resize.vir").exists()


@pytest.mark.parametrize("attrs", [{"antialias": 0}, {"cubic_coeff_a": -0.5}])
def test_attributes_at_their_default_or_without_effect_pass(tmp_path, capsys, attrs):
    model = _save(tmp_path, lambda m: _resize(m, **attrs), "resize", opset=18)
    code, _, err = _import(capsys, model)
    assert (code, err) == (0, "")


def test_batch_norm_in_training_mode_is_not_folded_but_refused(tmp_path, capsys):
    def build(m):
        y = m.node("Conv", [m.input("x", [1, 3, 6, 6]), m.weight((4, 3, 3, 3))], kernel_shape=[3, 3])
        stats = [m.init(np.full(4, v, np.float32)) for v in (1.0, 0.0, 0.0, 1.0)]
        return m.node("BatchNormalization", [y] + stats, training_mode=1, n_out=3)[0]
    model = _save(tmp_path, build, "bn")
    code, out, err = _import(capsys, model)
    assert (code, out) == (1, "")
    assert "(BatchNormalization, domain ai.onnx, opset 17): BatchNormalization attribute training_mode=1 " \
           "is not supported (vpuc implements only its default, 0)\n" in err
