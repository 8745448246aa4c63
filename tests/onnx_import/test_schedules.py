"""``--schedule naive|default`` on the zoo's models (test sizes): the default schedule
computes the same outputs bit for bit (the same tasks compute the same values; only DDR
layouts, the order and the sources of copies change), matches onnxruntime within the
whole-model tolerance of ``test_import_models.py``, ends sooner, and neither schedule
ends under the lower bound, which does not depend on the schedule."""

from __future__ import annotations

import json
import re

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.diagnostics import UsageError
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaMode, DmaTask, DpuOp
from vpuc.onnx_import.zoo import encoder_layer, mobilenet_v3_small, resnet18
from runtime_sim.bound_input import program_bound
from runtime_sim.engines.dpu import workload
from runtime_sim.plan import DPU
from vpuc.cost.bound import ideal_dpu_cycles
from tests.fusion.dpu_testlib import assert_close
from tests.sim.simlib import run_cli

MODELS = {
    "resnet18": lambda: resnet18(size=32, width=8, classes=10),
    "mobilenet_v3_small": lambda: mobilenet_v3_small(size=64, classes=10),
    "encoder_layer": lambda: encoder_layer(seq=17, width=48, heads=3),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tmp_path_factory):
    builder = MODELS[request.param]()
    path = builder.save(tmp_path_factory.mktemp(request.param) / "m.onnx", request.param)
    rng = np.random.default_rng(7)
    feeds = {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
             .astype(np.float32) for v in builder.inputs}
    runs = {}
    for schedule in ("naive", "default"):
        program = api.compile(path, schedule=schedule)
        inputs = {b.name: feeds[b.name].astype(np.float16) for b in program.module.buffers
                  if b.kind is BufferKind.INPUT}
        runs[schedule] = (program, api.simulate(program, inputs))
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return request.param, runs, want


def test_default_computes_what_naive_does_and_what_onnxruntime_does(model):
    _, runs, want = model
    naive, default = runs["naive"][1].outputs, runs["default"][1].outputs
    assert naive.keys() == default.keys()
    # the schedules cut layers into other blocks and fold views into MatMul operands, so
    # BLAS may sum in another order: at most one f16 rounding apart per layer
    layers = len(runs["default"][0].module.layers)
    for name in naive:
        assert_close(default[name], naive[name], ulps=layers)
    got = next(iter(default.values())).astype(np.float32).reshape(want.shape)
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))


def test_default_is_faster_and_both_respect_their_bound(model):
    """The bound's DPU work does not depend on the schedule but for the squeeze-excite
    products default runs on the DPU; its ACT SHAVE work is the cycles
    of the kernels the schedule generated (an NHWC segment's kernels walk another storage
    order) and its DDR bytes count the constants the blocks read (a padded first layer's
    zeros follow its blocks), so each schedule is held to its own."""
    name, runs, _ = model
    cycles = {s: sim.cycles for s, (_, sim) in runs.items()}
    bounds = {s: program_bound(sim.result.plan, sim.result.timeline)
              for s, (_, sim) in runs.items()}
    assert cycles["default"] < cycles["naive"]
    # but for the squeeze-excite products default moves from ACT SHAVE to the DPU
    # (``lower_dpu_scale``: depthwise 1x1 convolutions, which naive has none of)
    products = {s: _scale_products_dpu(sim) for s, (_, sim) in runs.items()}
    assert products["naive"] == 0
    assert (products["default"] > 0) == (name == "mobilenet_v3_small")
    assert bounds["default"].engine_totals["DPU"] - products["default"] == \
        pytest.approx(bounds["naive"].engine_totals["DPU"], rel=1e-9)
    for s in runs:
        assert 0 < bounds[s].cycles <= cycles[s]


def _scale_products_dpu(sim) -> float:
    """The ideal DPU cycles of a run's depthwise 1x1 convolutions per DPU (the bound's
    measure: work spread over every DPU)."""
    plan = sim.result.plan
    total = 0.0
    for u in range(plan.size):
        task = plan.task[u]
        if plan.kind[u] == DPU and task.op is DpuOp.DWCONV and tuple(task.kernel) == (1, 1):
            tensors = {k: r.type for k, r in plan.dpu_regions(u).items()}
            total += ideal_dpu_cycles(workload(task, plan.variant[u], tensors), plan.arch.dpu)
    return total / (plan.arch.structure.tiles * plan.arch.structure.dpus_per_tile)


def _dmas(program):
    symbols = SymbolTable(program.module)
    for task_list in program.module.task_lists:
        for task in task_list.tasks:
            if isinstance(task, DmaTask):
                yield task, symbols.region(task.src), symbols.region(task.dst)


def _layer_permutes(program) -> list:
    """The types of the transposing loads and stores between CMX and a DDR value between
    layers (a graph Transpose, DDR -> DDR, is the model's own)."""
    return [src.type for t, src, dst in _dmas(program) if t.mode is DmaMode.PERMUTE
            and {src.kind, dst.kind} == {BufferKind.CMX, BufferKind.DDR}]


def test_default_transposes_fewer_values_between_layers(model):
    name, runs, _ = model
    naive, default = (_layer_permutes(runs[s][0]) for s in ("naive", "default"))
    assert len(default) < len(naive) or not naive
    if name in ("resnet18", "mobilenet_v3_small"):
        # Only the pooled features entering the classifier's Flatten (a DMA segment, which
        # reads the graph's order) are still transposed: 1x1 pixels, a few bytes.  In
        # MobileNetV3 the HardSwish and squeeze-excite ACT segments between DPU layers run
        # NHWC (``schedule_layouts.ddr_layouts``).
        assert naive and all(t.dims[2:] == (1, 1) for t in default)


def test_default_reads_each_constant_from_ddr_once(model):
    _, runs, _ = model
    const_reads: dict[str, int] = {}
    for task, src, dst in _dmas(runs["default"][0]):
        # whole CMX buffers filled from a constant (weights, biases, pipeline constants;
        # not the zeros blocks copy into their input's padded channels: only default, whose
        # values between layers are NHWC, has them; naive's NCHW inputs go through the DPU
        # permute, which writes those channels)
        if src.kind is BufferKind.CONST and dst.kind is BufferKind.CMX \
                and dst.byte_offset == 0 and dst.type.nbytes == dst.root.type.nbytes \
                and "chzeros" not in src.root.name:
            key = (src.root.name, src.byte_offset, src.type.dims)
            const_reads[key] = const_reads.get(key, 0) + 1
    shared = [k for k, n in const_reads.items() if n > 1]
    assert shared == [], "a constant region loaded from DDR by more than one task"
    # A MatMul's column chunks load from one table in default (``lower_dpu_table.
    # MatrixTable``: the bias rows after each chunk's weights, no bias loads of their own),
    # chunked by its own estimate: checked above (each region once), not counted below.
    tables = {src.root.name for t, src, _ in _dmas(runs["default"][0])
              if src.root.name.endswith(".wb")
              and t.label.startswith(src.root.name.removesuffix("wb") + "w.c")}
    assert model[0] != "mobilenet_v3_small" or tables    # its classifier's Gemm
    const_reads = {k: n for k, n in const_reads.items() if k[0] not in tables}
    naive_loads = {t.label for t, src, dst in _dmas(runs["naive"][0])
                   if src.kind is BufferKind.CONST and dst.kind is BufferKind.CMX
                   and dst.byte_offset == 0 and dst.type.nbytes == dst.root.type.nbytes
                   and "chzeros" not in src.root.name
                   and not any(t.label.startswith(name.removesuffix("wb")) for name in tables)}
    default = {t.label: (t, src) for t, src, _ in _dmas(runs["default"][0])}

    def same(label: str) -> str:
        # a square constant weight naive stages (``w.tN.stage``, then a permute in CMX)
        # default transposes at compile time and loads as ``w.tN``
        return label if label in default else label.removesuffix(".stage")
    # A layer default cuts over output channels (``lower_dpu_nn_cut``: its input NHWC in
    # DDR, where naive's is NCHW) loads each chunk's weights once, from DDR, where naive's
    # row cut loads them once per tile: no counterpart to copy; checked above (each region
    # once) and left out of the count.
    recut = {label.split(".")[0] for label in naive_loads if same(label) not in default}
    recut = {layer for layer in recut
             if any(d.startswith(layer + ".") and ".load_w.c" in d for d in default)}
    naive_loads = {label for label in naive_loads if label.split(".")[0] not in recut}
    recut_reads = {(src.root.name, src.byte_offset, src.type.dims)
                   for t, src, _ in _dmas(runs["default"][0]) if t.label.split(".")[0] in recut}
    const_reads = {k: n for k, n in const_reads.items() if k not in recut_reads}
    copies = [default[same(label)][0] for label in naive_loads
              if default[same(label)][1].kind is BufferKind.CMX]
    assert sum(const_reads.values()) + len(copies) == len(naive_loads)
    for copy in copies:                # waits only on the load it copies
        assert len(copy.waits) == 1


def test_default_runs_elementwise_tails_on_the_dpu_output_blocks(model):
    """``fuse_epilogue``: MobileNetV3's HardSwish after a convolution runs on the
    convolution's output blocks in CMX (ACT SHAVE tasks of the DPU segment), and so do
    ResNet-18's residual Adds (a DPU eltwise task per block, the shortcut loaded beside
    it); the values between them are no DDR buffers any more."""
    name, runs, _ = model
    ddr = {s: {b.name for b in p.module.buffers if b.kind is BufferKind.DDR}
           for s, (p, _) in runs.items()}
    labels = [t.label or "" for tl in runs["default"][0].module.task_lists for t in tl.tasks]
    on_act = [x for x in labels if ".act" in x]
    on_dpu = [x for x in labels if ".convolution.add" in x]
    assert ddr["default"] <= ddr["naive"]
    if name == "mobilenet_v3_small":
        assert on_act and len(ddr["default"]) < len(ddr["naive"])
    if name == "resnet18":
        # every residual Add follows a convolution whose output only it reads
        adds = {x.split(".")[0] for x in labels if x.startswith("add_")}
        assert on_dpu and not adds and len(ddr["default"]) < len(ddr["naive"])


def test_default_segments_wait_on_what_they_read(model):
    """``schedule_deps.relax_gates``: loads of DDR values wait on the stores that write them
    (``*.written``), not all on their predecessor's last store; every barrier still has a
    waiter."""
    _, runs, _ = model
    module = runs["default"][0].module
    waits = {w for tl in module.task_lists for t in tl.tasks for w in t.waits}
    written = [b.name for b in module.barriers if b.name.endswith(".written")]
    assert written and set(written) <= waits
    assert {b.name for b in module.barriers} <= waits


def test_unknown_schedule_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown schedule 'fast'; expected one of: naive, default"):
        api.compile_text("module @m arch NPU37XX\n", "<t>", schedule="fast")


def test_schedule_option_on_the_command_line(capsys, monkeypatch):
    runs = {}
    for schedule in ("naive", "default"):
        code, stdout, err = run_cli(["run", "examples/graph_conv.vir", "--timing-only", "--json",
                                     "--schedule", schedule], capsys, monkeypatch)
        assert code == 0, err
        runs[schedule] = json.loads(stdout)
    # the DPU's work does not depend on the schedule; the ACT SHAVE's does (the default one
    # runs the elementwise tail on the DPU's output blocks in CMX: kernels of other shapes)
    assert runs["default"]["bound"]["engine_totals"]["DPU"] == \
        runs["naive"]["bound"]["engine_totals"]["DPU"]
    for run in runs.values():
        assert 0 < run["bound"]["cycles"] <= run["cycles"]
    assert runs["default"]["cycles"] <= runs["naive"]["cycles"]
    with pytest.raises(SystemExit) as exit_:
        run_cli(["compile", "examples/graph_conv.vir", "--schedule", "fast"], capsys, monkeypatch)
    assert exit_.value.code == 2
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_prefetch_leaves_cmx_to_channel_split_layers(tmp_path):
    """ResNet-18's last stage at full size: 3x3 convolutions whose weights (up to 4.5 MiB) are
    split over output channels, 442 KB chunks; prefetching every chunk of the next layer
    while one runs left no CMX gap (``EARLY_CMX_BYTES``).  It compiles and is faster."""
    from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn
    m = ModelBuilder(seed=1)
    y = _conv_bn(m, m.input("x", [1, 256, 14, 14]), 256, 512, 3, stride=2)
    y = _conv_bn(m, _conv_bn(m, y, 512, 512, 3), 512, 512, 3)
    m.output(y)
    path = m.save(tmp_path / "stage4.onnx", "stage4")
    cycles = {s: api.simulate(api.compile(path, schedule=s), timing_only=True).cycles
              for s in ("naive", "default")}
    assert cycles["default"] < cycles["naive"]


def test_default_loads_only_the_pixels_a_strided_1x1_convolution_reads(model):
    """ResNet's downsample convolutions (1x1, stride 2, no padding) read every other row
    and column: under --schedule default (NHWC input) their blocks load just those, by a
    strided DMA, and run as stride-1 convolutions; naive's load whole rows.  Their
    outputs are the same bits (``test_default_computes_what_naive_does...``)."""
    name, runs, _ = model

    def strided_1x1(program, stride):
        from vpuc.ir.tasks import DpuTask
        return {t.label.rsplit(".c", 1)[0] for tl in program.module.task_lists
                for t in tl.tasks if isinstance(t, DpuTask) and t.kernel == (1, 1)
                and t.stride == stride}

    if name != "resnet18":       # MobileNet's strided convolutions are depthwise 3x3 / 5x5
        assert not strided_1x1(runs["naive"][0], (2, 2))
        return

    # (this small model's other two have 8 input channels, padded to 16, or 1 output row
    # on 2 tiles: they keep the strided convolution)
    converted = strided_1x1(runs["naive"][0], (2, 2)) & strided_1x1(runs["default"][0], (1, 1))
    assert converted
    loads = [(src, dst) for t, src, dst in _dmas(runs["default"][0])
             if any(t.label.startswith(p + ".load") and t.label[len(p) + 5:].isdigit()
                    for p in converted)]                     # block k's input: load<k>
    assert loads
    for src, dst in loads:        # the read pixels only, from a view that skips the others
        assert src.type.dims == dst.type.dims
        assert src.strides_bits != dst.strides_bits


def test_a_ddr_bound_layers_first_weights_load_during_the_dpu_bound_layers_before(
        tmp_path, monkeypatch):
    """ResNet-18's stage 3 -> 4 at full size: two 256-channel 3x3 layers on 14x14 (DPU-bound),
    a stride-2 one, then a 512-channel 3x3 layer on 7x7 whose 4.7 MB of weights keep the
    DDR busier than its blocks keep the DPU (``schedule_room.HEAVY_RATIO``).  Its first
    weight chunks load during the 256-channel layers (``deepen``), ahead of the stride-2
    layer's input in the DMA list, not after it; the network ends sooner."""
    from vpuc.fusion import schedule_room
    from vpuc.ir.tasks import Executor
    from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn
    m = ModelBuilder(seed=1)
    y = _conv_bn(m, _conv_bn(m, m.input("x", [1, 256, 14, 14]), 256, 256, 3), 256, 256, 3)
    y = _conv_bn(m, _conv_bn(m, y, 256, 512, 3, stride=2), 512, 512, 3)
    m.output(y)
    path = m.save(tmp_path / "stage3to4.onnx", "stage3to4")

    def run():
        program = api.compile(path, schedule="default")
        labels = [t.label for tl in program.module.task_lists if tl.executor is Executor.DMA
                  for t in tl.tasks]
        return api.simulate(program, timing_only=True).cycles, labels

    def ahead_of_strided(labels):
        """The 512-channel layer's weight loads ahead of the stride-2 layer's first input
        load (the layers in order of their first input loads, which stay in place; a
        block reading its input in place on its tile has none, so not always load0)."""
        inputs = [i for i, label in enumerate(labels)
                  if re.fullmatch(r"load\d+", label.rsplit(".", 1)[1])]
        layers = list(dict.fromkeys(labels[i].rsplit(".", 1)[0] for i in inputs))
        assert len(layers) == 4
        strided = next(i for i in inputs if labels[i].startswith(f"{layers[2]}."))
        return [label for label in labels[:strided] if label.startswith(f"{layers[3]}.load_w.")]

    heavy, labels = run()
    assert ahead_of_strided(labels)
    monkeypatch.setattr(schedule_room, "HEAVY_RATIO", float("inf"))
    light, labels = run()
    assert not ahead_of_strided(labels)
    assert heavy < light


def test_heavy_loads_keep_their_gate_when_allocate_cmx_finds_no_room(tmp_path, monkeypatch):
    """The room a heavy segment's early loads take beside the segment before theirs
    (``EarlyRoom.goes_back``) is only allocate-cmx's trial's to grant: when every trial
    fails, they wait on their gate again and the program still allocates and computes
    what the naive schedule does."""
    from vpuc.fusion import schedule
    from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn
    m = ModelBuilder(seed=2)
    y = _conv_bn(m, m.input("x", [1, 256, 14, 14]), 256, 256, 3)
    y = _conv_bn(m, _conv_bn(m, y, 256, 512, 3, stride=2), 512, 512, 3)
    m.output(y)
    path = m.save(tmp_path / "heavy.onnx", "heavy")
    monkeypatch.setattr(schedule, "cmx_fits", lambda module, arch: False)
    program = api.compile(path, schedule="default")
    loads = [t for tl in program.module.task_lists for t in tl.tasks
             if isinstance(t, DmaTask) and ".load_w." in t.label]
    heavy = [t for t in loads if t.label.startswith(loads[-1].label.split(".")[0] + ".")]
    assert heavy and all(t.waits for t in heavy)       # none prefetched without a trial
    x = np.random.default_rng(3).standard_normal((1, 256, 14, 14)).astype(np.float16)
    got = next(iter(api.simulate(program, {"x": x}).outputs.values()))
    want = next(iter(api.simulate(api.compile(path, schedule="naive"), {"x": x}).outputs.values()))
    assert_close(got, want, ulps=len(program.module.layers))
