"""The DPU's channel constraints (``vpuc/fusion/lower_dpu_channels.py``, the rule in
``vpuc/verifier/dpu_channels.py``): layers whose channel counts are not multiples of
16 are padded in CMX (zero input channels, zero-padded weights and bias, only the real
channels stored; a matmul's K and N likewise, an eltwise add's channels) and channelwise
workloads cut into 64/32/16-channel variants; the
results still match onnxruntime to ``test_lower_dpu_nn.compile_and_compare``'s
derived f16 bound (the zero channels add exact zeros to the f32 sums), and the rule
rejects a lowered program that breaks them, at the variant's location.
"""

from __future__ import annotations

import pytest

from tests.onnx_import.test_lower_dpu_nn import _x, compile_and_compare
from vpuc.fusion.lower_dpu_channels import aligned, channel_chunks
from vpuc.ir.tasks import DpuOp
from vpuc.verifier import verify_module
from vpuc.vir.parser import parse_text


def test_chunks_are_64_32_16_largest_first():
    assert aligned(1) == 16 and aligned(16) == 16 and aligned(33) == 48
    assert channel_chunks(72) == [(0, 64), (64, 80)]
    assert channel_chunks(120) == [(0, 64), (64, 128)]
    assert channel_chunks(100) == [(0, 64), (64, 96), (96, 112)]
    assert channel_chunks(16) == [(0, 16)]


UNALIGNED = {
    # (build, DPU op): input and output channels padded to 16
    "conv_3_to_5": (lambda m: m.node("Relu", [m.node("Conv", [_x(m, (1, 3, 8, 7)), m.weight((5, 3, 3, 3)),
                                                               m.weight((5,), 0.1)],
                                                     kernel_shape=[3, 3], pads=[1, 1, 1, 1])]), DpuOp.CONV),
    "conv_24_to_40_strided": (lambda m: m.node("Conv", [_x(m, (1, 24, 9, 9)), m.weight((40, 24, 1, 1))],
                                               kernel_shape=[1, 1], strides=[2, 2]), DpuOp.CONV),
    # depthwise over 72 channels: 80 in CMX, variants of 64 + 16
    "depthwise_72": (lambda m: m.node("Conv", [_x(m, (1, 72, 6, 6)), m.weight((72, 1, 3, 3)), m.weight((72,), 0.1)],
                                      kernel_shape=[3, 3], group=72, pads=[1, 1, 1, 1]), DpuOp.DWCONV),
    "maxpool_100": (lambda m: m.node("MaxPool", [_x(m, (1, 100, 6, 6))], kernel_shape=[2, 2], strides=[2, 2]),
                    DpuOp.MAXPOOL),
    "avgpool_8": (lambda m: m.node("GlobalAveragePool", [_x(m, (1, 8, 5, 5))]), DpuOp.AVGPOOL),
    # a residual join of 24 channels: the conv and the DPU add both padded to 32
    "residual_add_24": (lambda m: m.node("Relu", [m.node("Add", [m.node(
        "Conv", [_x(m, (1, 24, 6, 6)), m.weight((24, 24, 3, 3))], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        "x"])]), {DpuOp.CONV, DpuOp.ADD}),
    # a matmul is a 1x1 conv to the DPU: K 24 -> 32 (zeroed columns), N 10 -> 16
    "gemm_k24_n10": (lambda m: m.node("Gemm", [_x(m, (5, 24)), m.weight((10, 24)), m.weight((10,), 0.1)],
                                      transB=1), DpuOp.MATMUL),
    "matmul_batched_k12_n20": (lambda m: m.node("MatMul", [_x(m, (2, 3, 7, 12)), m.weight((12, 20))]),
                               DpuOp.MATMUL),
}


@pytest.mark.parametrize("case", sorted(UNALIGNED))
def test_unaligned_layers_are_padded_and_chunked(case, tmp_path):
    build, op = UNALIGNED[case]
    tasks = compile_and_compare(tmp_path, build, seed=sorted(UNALIGNED).index(case))
    # an NCHW model input comes in through NCE permutes (lower_dpu_permute)
    permutes = [t for t in tasks if t.op is DpuOp.PERMUTE]
    tasks = [t for t in tasks if t.op is not DpuOp.PERMUTE]
    assert {t.op for t in tasks} == (op if isinstance(op, set) else {op})
    for v in (v for task in permutes for v in task.variants):
        assert v.start[2] == 0 and (v.end[2] + 1 == 4 or (v.end[2] + 1) % 16 == 0)
    for task in tasks:
        for v in task.variants:
            count = v.end[2] - v.start[2] + 1
            assert v.start[2] % 16 == 0
            if task.op in (DpuOp.CONV, DpuOp.ADD, DpuOp.MATMUL):
                assert count % 16 == 0
            else:
                assert count in (16, 32, 64)


def test_padded_conv_does_not_declare_the_graph_weights(tmp_path):
    """The lowering declares a zero-padded copy of the weights (16 output channels; 4 input
    channels: the NCHW model input makes it a compressed convolution, ``lower_dpu_permute``)
    with the zero-padded bias in one row after them (16 values: a 4x2x2 box of the row's
    4x3x3, ``lower_dpu_channels.bias_rows``), no bias constant of its own; the graph's
    weights constant is not read, so it is not in the program."""
    from vpuc import api
    from vpuc.onnx_import.zoo import ModelBuilder
    m = ModelBuilder(seed=0, opset=17)
    w = m.weight((5, 3, 3, 3))
    m.output(m.node("Conv", [_x(m, (1, 3, 6, 6)), w, m.weight((5,), 0.1)], kernel_shape=[3, 3]))
    program = api.compile(m.save(tmp_path / "m.onnx", "m"))
    consts = {b.name: b for b in program.module.buffers if b.kind.value == "const"}
    assert w not in consts
    padded_weights = [b for n, b in consts.items() if n.endswith(".wpad")]
    assert [b.type.dims for b in padded_weights] == [(17, 4, 3, 3)]
    assert [n for n in consts if ".bias" in n] == []
    views = {v.name: v for v in program.module.views}
    dpu = [t for tl in program.module.task_lists for t in tl.tasks
           if hasattr(t, "variants") and t.weights is not None]
    assert dpu
    for task in dpu:               # two views of the one CMX buffer the weights load fills
        weights, bias = views[task.weights], views[task.bias]
        assert weights.base == bias.base
        assert [(s.start, s.stop) for s in bias.slices] == [(16, 17), (0, 4), (0, 2), (0, 2)]



def _unpadded(monkeypatch):
    """Values between layers keep their own channels in CMX, not the DPU's aligned count
    (``resident.padded_channels``, which would read and write the pads in place): their
    readers' blocks zero the padded channels, what these tests look at."""
    from vpuc.fusion import resident
    monkeypatch.setattr(resident, "padded_channels", lambda *args: None)


def test_channel_zeros_are_copied_from_a_block_sized_vector_in_cmx(tmp_path, monkeypatch):
    """The zeros of an input's padded channels are copied CMX -> CMX from a zero vector
    each tile loads once (``lower_dpu_channels.zero_vector``: no DDR latency per block),
    on the load channel after it; the vector holds one block's zeros, not the whole
    image's (a fuzz finding: a 1M-row image stored an 870 MB zero constant).  A small CMX
    budget gives several blocks.  The second convolution's input is an NHWC value of 5
    channels (the first's, NCHW, is laid out by a DPU permute, which writes its zero
    channels itself)."""
    from vpuc import api
    from vpuc.ir.symbols import SymbolTable
    from vpuc.onnx_import.zoo import ModelBuilder
    m = ModelBuilder(seed=0, opset=17)
    first = m.node("Conv", [_x(m, (1, 3, 64, 16)), m.weight((5, 3, 3, 3))], kernel_shape=[3, 3],
                   pads=[1, 1, 1, 1])
    m.output(m.node("Conv", [first, m.weight((8, 5, 3, 3))], kernel_shape=[3, 3],
                    pads=[1, 1, 1, 1]))
    _unpadded(monkeypatch)
    program = api.compile(m.save(tmp_path / "m.onnx", "m"), cmx_budget=16384,
                          schedule="default")
    mod = program.module
    zeros = [b for b in mod.buffers if b.kind.value == "const" and "chzeros" in b.name]
    assert len(zeros) == 1 and zeros[0].type.num_elements < 11 * 64 * 16 / 2
    symbols = SymbolTable(mod)
    dma = [t for tl in mod.task_lists if tl.executor.name == "DMA" for t in tl.tasks]
    fills = [t for t in dma if ".zero" in (t.label or "")]
    assert len(fills) > 2                                        # several blocks
    for task in fills:
        src, dst = symbols.region(task.src), symbols.region(task.dst)
        # the program's shared vector of the tile (``SHARED_ZEROS_BYTES``)
        assert src.kind.value == "cmx" and src.root.name.endswith(f"chzeros.t{src.root.tile}.f16")
        assert dst.type.dims[1] == 11 and src.type.num_elements == dst.type.num_elements
        assert task.channel == 0
        # after the load of its tile's vector in the channel's FIFO
        vector_load = next(i for i, t in enumerate(dma)
                           if symbols.region(t.dst).root.name == src.root.name)
        assert vector_load < dma.index(task)
    assert not [t for t in dma if symbols.region(t.src).root.name == zeros[0].name
                and ".zero" in (t.label or "")]                  # no fill reads DDR


def test_layers_share_one_zero_vector_per_tile_under_the_default_schedule(tmp_path,
                                                                         monkeypatch):
    """Under ``--schedule default`` two convolutions whose NHWC inputs have 5 channels
    copy their padded channels' zeros from one vector per tile for the whole program,
    each loaded once from one ``splat 0`` constant (``lower_dpu_channels.zero_vector``);
    the second layer's copies wait on that load through a barrier (a CMX buffer of two
    segments: ``schedule_deps``), and the result is the naive schedule's (NCHW values
    between the layers, laid out by the DPU permute, which writes the padded channels'
    zeros itself) bit for bit: the same f32 sums of the same values, rounded once."""
    import numpy as np

    from vpuc import api
    from vpuc.fusion.blocked_program import sanitize
    from vpuc.ir.symbols import SymbolTable
    from vpuc.onnx_import.zoo import ModelBuilder
    m = ModelBuilder(seed=1, opset=17)
    y = m.node("Conv", [_x(m, (1, 3, 12, 10)), m.weight((5, 3, 3, 3))], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1])
    y = m.node("Conv", [y, m.weight((5, 5, 3, 3))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    out = m.node("Conv", [y, m.weight((8, 5, 3, 3))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    _unpadded(monkeypatch)
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 10)).astype(np.float16)
    got = {}
    for schedule in ("naive", "default"):
        program = api.compile(path, schedule=schedule)
        sim = api.simulate(program, {"x": x})
        assert not sim.races
        got[schedule] = sim.outputs[sanitize(out)]
        mod, symbols = program.module, SymbolTable(program.module)
        dma = [t for tl in mod.task_lists if tl.executor.name == "DMA" for t in tl.tasks]
        fills = [t for t in dma if ".zero" in (t.label or "")]
        vectors = {symbols.region(t.src).root.name for t in fills}
        layers = {t.label.split(".")[0] for t in fills}
        loads = [t for t in dma if symbols.region(t.dst).root.name in vectors]
        if schedule == "default":
            assert len(layers) == 2
            assert len(vectors) == 2 and len(loads) == 2       # one per tile, for both layers
            late = [t for t in fills if t.label.split(".")[0] != loads[0].label.split(".")[0]]
            assert late and all(set(t.waits) & {b for load in loads for b in load.updates}
                                for t in late)
        else:              # NCHW values between layers: the DPU permute writes the zeros
            assert not fills
    # The same f32 products summed in blocks of other shapes (numpy's BLAS may order the
    # sums differently): at most one f16 ulp of the output's range per layer apart.
    ulp = 2.0 ** -10 * float(np.abs(got["naive"].astype(np.float32)).max())
    np.testing.assert_allclose(got["default"].astype(np.float32),
                               got["naive"].astype(np.float32), rtol=0, atol=3 * ulp)


def test_first_layer_numerics_match_onnxruntime(tmp_path):
    """A ResNet-style first layer (3 channels, 7x7, stride 2, bias) through the permutes
    and the compressed convolution, against onnxruntime and the graph reference."""
    tasks = compile_and_compare(tmp_path, lambda m: m.node(
        "Conv", [m.input("x", (1, 3, 40, 24)), m.weight((20, 3, 7, 7)), m.weight((20,), 0.1)],
        kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]))
    assert {t.op for t in tasks} == {DpuOp.PERMUTE, DpuOp.CONV}
    assert sum(t.op is DpuOp.CONV for t in tasks) >= 2         # a block per tile at least


VIR = """module @m arch NPU37XX
cmx %in : 1x8x8x8xf16 NHWC tile 0 at 0
cmx %w : 32x8x3x3xf16 NHWC tile 0 at 4096
cmx %out : 1x32x8x8xf16 NHWC tile 0 at 16384
cmx %dwin : 1x48x8x8xf16 NHWC tile 0 at 65536
cmx %dww : 48x1x3x3xf16 NHWC tile 0 at 131072
cmx %dwout : 1x48x8x8xf16 NHWC tile 0 at 196608
tasks DPU {
  conv: dpu conv on tile 0 in(%in) weights(%w) out(%out) kernel(3, 3) pad(1, 1, 1, 1) {
    variant start(0, 0, 0) end(7, 7, 23)
    variant start(0, 0, 24) end(7, 7, 31)
  }
  dw: dpu dwconv on tile 0 in(%dwin) weights(%dww) out(%dwout) kernel(3, 3) pad(1, 1, 1, 1) {
    variant start(0, 0, 0) end(7, 7, 47)
  }
}
"""


def test_rule_rejects_unaligned_variants_of_a_lowered_program():
    module = parse_text(VIR, "lowered.vir")
    assert not verify_module(module).has_errors          # hand-written: any channel count
    module.attributes["graph"] = "lowered"
    errors = [d for d in verify_module(module).items if d.severity.value == "error"]
    text = "\n".join(f"{d.loc.line}:{d.loc.col}: {d.message}" for d in errors)
    assert len(errors) == 4
    assert "9:31: dpu conv input %in has 8 channels" in text
    assert "10:5: dpu conv variant covers channels 0..23 (24)" in text
    assert "11:5: dpu conv variant covers channels 24..31 (8)" in text
    assert "14:5: dpu dwconv variant covers channels 0..47 (48); a DPU workload of this op takes " \
           "16, 32 or 64 channels" in text


PERMUTE_VIR = """module @m arch NPU37XX
cmx %x : 1x3x8x8xf16 NCHW tile 0 at 0
cmx %y : 1x6x8x8xf16 NHWC tile 0 at 4096
cmx %z : 1x4x8x8xf16 NHWC tile 0 at 8192
cmx %w : 16x4x3x3xf16 NHWC tile 0 at 12288
cmx %out : 1x16x8x8xf16 NHWC tile 0 at 16384
tasks DPU {
  p6: dpu permute on tile 0 in(%x) out(%y) {
    variant start(0, 0, 0) end(7, 7, 5)
  }
  p4: dpu permute on tile 0 in(%x) out(%z) {
    variant start(0, 0, 0) end(7, 3, 3)
    variant start(0, 4, 0) end(7, 7, 1)
    variant start(0, 4, 2) end(7, 7, 3)
  }
  conv: dpu conv on tile 0 in(%z) weights(%w) out(%out) kernel(3, 3) pad(1, 1, 1, 1) {
    variant start(0, 0, 0) end(7, 7, 15)
  }
}
"""


def test_rule_takes_permutes_and_compressed_convolutions():
    """A permute writes 4 channels or a multiple of 16, each variant all of them; a conv
    may read 4 input channels (NPU37XX's compressed convolution)."""
    module = parse_text(PERMUTE_VIR, "lowered.vir")
    assert not verify_module(module).has_errors          # hand-written: any channel count
    module.attributes["graph"] = "lowered"
    errors = [d for d in verify_module(module).items if d.severity.value == "error"]
    text = "\n".join(f"{d.loc.line}:{d.loc.col}: {d.message}" for d in errors)
    assert len(errors) == 3, text
    assert "8:40: dpu permute output %y has 6 channels; the DPU writes 4" in text
    assert "13:5: dpu permute variant covers channels 0..1; a permute workload writes all 4" \
        in text
    assert "14:5: dpu permute variant covers channels 2..3;" in text


def test_each_channel_chunk_of_a_depthwise_task_runs_in_its_own_cheapest_mode(tmp_path):
    """MobileNetV3-Small's 240-channel 5x5 depthwise layer on a 14x14 map: its variants are
    chunks of 64, 64, 64, 32 and 16 channels (``channel_chunks``), each in the mode the cost
    model finds cheapest for its own box (``lower_dpu.run_cost``), never dearer than the
    mode of the whole 240 channels (CUBOID_4x16, whose 64-channel grid pads the 32 and 16
    chunks to 64); the result still matches onnxruntime and the graph reference."""
    from dataclasses import replace

    from vpuc.cost import DpuWorkload, choose_mode, dpu_cost, load_timing
    tasks = compile_and_compare(tmp_path, lambda m: m.node(
        "Conv", [_x(m, (1, 240, 14, 14)), m.weight((240, 1, 5, 5))], kernel_shape=[5, 5],
        pads=[2, 2, 2, 2], group=240))
    params = load_timing("NPU37XX").dpu
    own = 0
    for task in (t for t in tasks if t.op is DpuOp.DWCONV):
        assert [v.end[2] - v.start[2] + 1 for v in task.variants[:5]] == [64, 64, 64, 32, 16]
        for v in task.variants:
            (x0, y0, z0), (x1, y1, z1) = v.start, v.end
            box = DpuWorkload(op="dwconv", elem="f16", width=x1 - x0 + 1, height=y1 - y0 + 1,
                              channels=z1 - z0 + 1, in_channels=z1 - z0 + 1, kernel=(5, 5))
            whole = choose_mode(replace(box, channels=240, in_channels=240), params)
            assert v.mode == choose_mode(box, params)
            assert dpu_cost(box, params, v.mode).cycles <= dpu_cost(box, params, whole).cycles
            own += v.mode != whole
    assert own          # the 32- and 16-channel chunks leave the 240 channels' mode
