"""lower-graph's refusals: a layer the DPU cannot run (f32, run-time dims, padding no
kernel window reaches, integer layers without scales) or one no block of which fits a
tile's CMX is a located error naming the layer and the reason, and no blob is written."""

from __future__ import annotations

import pytest

from vpuc.cli import main

ERRORS = {
    "f32": ("""module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x8x8x8xf32
  %w = Constant(splat 0.5) : 8x8x3x3xf32
  %c = Convolution{strides = [2, 2]}(%x, %w)
  %r = Relu(%c)
  Result(%r)
}
""", """\
net.vir:5:3: error: Convolution{strides = [2, 2], pads_begin = [0, 0], pads_end = [0, 0], \
dilations = [1, 1]} %c cannot run on the DPU: it is f32; the DPU lowering takes Convolution on \
f16 or bf16 (the DPU has no f32: insert a Convert)
      %c = Convolution{strides = [2, 2]}(%x, %w)
      ^
"""),
    "dynamic": ("""module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x8x?<=16x8xf16
  %w = Constant(splat 0.5) : 8x8x1x1xf16
  %c = Convolution(%x, %w)
  Result(%c)
}
""", """\
net.vir:5:3: error: Convolution{strides = [1, 1], pads_begin = [0, 0], pads_end = [0, 0], \
dilations = [1, 1]} %c cannot run on the DPU: it has run-time dims, and DPU tasks have static \
shapes
      %c = Convolution(%x, %w)
      ^
"""),
    "padding": ("""module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x8x8x8xf16
  %w = Constant(splat 0.5) : 8x8x1x1xf16
  %c = Convolution{pads_begin = [1, 1], pads_end = [1, 1]}(%x, %w)
  %p = MaxPool{kernel = [2, 2], pads_begin = [0, 2]}(%x)
  Result(%c)
  Result(%p)
}
""", """\
net.vir:5:3: error: Convolution{strides = [1, 1], pads_begin = [1, 1], pads_end = [1, 1], \
dilations = [1, 1]} %c cannot run on the DPU: its height padding (1, 1) is wider than the kernel \
window can reach (0); a window of padding only has no DPU form
      %c = Convolution{pads_begin = [1, 1], pads_end = [1, 1]}(%x, %w)
      ^
net.vir:6:3: error: MaxPool{kernel = [2, 2], strides = [1, 1], pads_begin = [0, 2], \
pads_end = [0, 0]} %p cannot run on the DPU: its width padding (2, 0) is wider than the kernel \
window can reach (1); a window of padding only has no DPU form
      %p = MaxPool{kernel = [2, 2], pads_begin = [0, 2]}(%x)
      ^
"""),
    "other_layers": ("""module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x8x4x4xf16
  %s = Softmax{axis = 1}(%x)
  %t = Transpose{order = [0, 2, 3, 1]}(%s)
  %r = Reshape{shape = [1, 128]}(%t)
  %i = Convert{to = i8}(%r)
  %w = Constant(splat 1) : 16x128xi8
  %m = MatMul{transpose_b = true}(%i, %w)
  Result(%m)
}
""", """\
net.vir:9:3: error: MatMul{transpose_a = false, transpose_b = true} %m cannot run on the DPU: it \
is i8; the DPU lowering takes MatMul on f16 or bf16 (an integer layer needs quantization scales \
the graph does not carry)
      %m = MatMul{transpose_b = true}(%i, %w)
      ^
"""),
    "too_big": ("""module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x16x4x40000xf16
  %w = Constant(splat 0.01) : 32x16x3x3xf16
  %c = Convolution{pads_begin = [1, 1], pads_end = [1, 1]}(%x, %w)
  Result(%c)
}
""", """\
net.vir:5:3: error: Convolution{strides = [1, 1], pads_begin = [1, 1], pads_end = [1, 1], \
dilations = [1, 1]} %c does not fit a tile's CMX: 19209216 bytes with one output row, 16 output \
channels and 16 input channels per block (input channels split into f32 partial sums) over a \
budget of 1048576
      %c = Convolution{pads_begin = [1, 1], pads_end = [1, 1]}(%x, %w)
      ^
"""),
}


@pytest.mark.parametrize("name", ERRORS)
def test_unsupported_layers_are_located_errors(name, tmp_path, monkeypatch, capsys):
    source, expected = ERRORS[name]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.vir").write_text(source)
    capsys.readouterr()
    assert main(["compile", "net.vir", "-o", "net.blob"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err == expected
    assert not (tmp_path / "net.blob").exists()
