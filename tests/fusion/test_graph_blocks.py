"""Several graph blocks in one module, and graph blocks beside hand-written tasks
(vpuc/fusion/lower_blocks.py, docs/vir.md "Several graph blocks, and graphs beside tasks"):
compiled and simulated against numpy references composed block by block."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.fusion.dpu_testlib import assert_close, constant
from vpuc import api
from vpuc.arch import load_arch
from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.reference.graph import run_graph
from vpuc.vir.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "graph_blocks.vir"


def compiled(text: str, schedule: str = "default"):
    """(graphs before lowering by name, compiled Program) of `vpuc compile`."""
    graphs = {g.name: g for g in parse_text(text, "<graphs>").graphs}
    return graphs, api.compile_text(text, "<test>", schedule=schedule)


def run_block(graph, inputs: dict) -> dict:
    """A block's reference outputs by value name, from its inputs by Parameter name."""
    outs = run_graph(graph, {p.result: inputs[p.result] for p in graph.parameters})
    return {r.operands[0]: out for r, out in zip(graph.results, outs)}


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The library gelu (docs/kernels.md): the tanh approximation in f32, stored f16."""
    x = x.astype(np.float32)
    k0 = np.float32(2 * np.sqrt(2 / np.pi))
    return (x / (1 + np.exp(-x * (k0 + np.float32(0.044715) * k0 * x * x)))).astype(np.float16)


@pytest.mark.parametrize("schedule", ["naive", "default"])
def test_example_runs_against_numpy(schedule):
    graphs, program = compiled(EXAMPLE.read_text(), schedule)
    rng = np.random.default_rng(1)
    x_in = rng.uniform(-3, 3, (1, 16, 16, 16)).astype(np.float16)
    result = api.simulate(program, {"in": x_in})
    assert not result.result.races
    x = np.clip(x_in, -2, 2)                          # the hand-written clamp: exact
    pooled = run_block(graphs["features"], {"x": x})["pooled"]
    h = run_block(graphs["head"], {"pooled": pooled})["h"]
    # MaxPool is exact; *0.5 and HSwish round per op in both; gelu (slope <= 1.13) adds
    # its own <= 1 ulp and the store's rounding to h's.
    assert_close(result.outputs["out"], gelu_tanh(h), ulps=4)
    side = run_block(graphs["side"], {"in": x_in})["side"]
    assert_close(result.outputs["side"], side, ulps=2)


CHAIN = ("module @chain arch NPU37XX\n"
         "graph @a {\n"
         "  %x = Parameter() : 1x16x8x8xf16 NCHW\n"
         + constant("w", (16, 16, 3, 3), seed=3)
         + constant("bias", (1, 16, 1, 1), seed=4) +
         "  %c = Convolution{pads_begin = [1, 1], pads_end = [1, 1]}(%x, %w)\n"
         "  %t = Add(%c, %bias)\n"
         "  %mid = Relu(%t)\n"
         "  Result(%mid)\n"
         "}\n"
         "graph @b {\n"
         "  %mid = Parameter() : 1x16x8x8xf16 NCHW\n"
         "  %t = MaxPool{kernel = [2, 2], strides = [2, 2]}(%mid)\n"
         "  %y = Sigmoid(%t)\n"
         "  Result(%y)\n"
         "}\n"
         "graph @c {\n"
         "  %x = Parameter() : 1x16x8x8xf16 NCHW\n"
         "  %t = Tanh(%x)\n"
         "  Result(%t)\n"
         "}\n")


@pytest.mark.parametrize("schedule", ["naive", "default"])
def test_chained_and_independent_blocks(schedule):
    graphs, program = compiled(CHAIN, schedule)
    kinds = {b.name: str(b.kind) for b in program.module.buffers if b.name in ("x", "mid", "y", "t")}
    assert kinds == {"x": "input", "mid": "ddr", "y": "output", "t": "output"}
    rng = np.random.default_rng(2)
    x = rng.uniform(-2, 2, (1, 16, 8, 8)).astype(np.float16)
    result = api.simulate(program, {"x": x})
    assert not result.result.races
    mid = run_block(graphs["a"], {"x": x})["mid"]
    assert_close(result.outputs["y"], run_block(graphs["b"], {"mid": mid})["y"], ulps=2)
    assert_close(result.outputs["t"], run_block(graphs["c"], {"x": x})["t"], ulps=2)


def test_blocks_of_the_same_names_do_not_collide():
    """Two blocks with the same internal names and bodies: each block's buffers, views,
    barriers and labels sit under its name; equal bodies still get a kernel per block."""
    body = ("  %{i} = Parameter() : 1x16x8x8xf16 NCHW\n  %t = Relu(%{i})\n"
            "  %u = HSwish(%t)\n  %{o} = Sigmoid(%u)\n  Result(%{o})\n")
    text = ("module @twins arch NPU37XX\n"
            f"graph @one {{\n{body.format(i='x', o='m')}}}\n"
            f"graph @two {{\n{body.format(i='m', o='y')}}}\n")
    graphs, program = compiled(text)
    labels = [t.label for tl in program.module.task_lists for t in tl.tasks]
    assert len(labels) == len(set(labels))
    assert {label.split(".")[0] for label in labels} == {"one", "two"}
    assert {k.name for k in program.module.kernels if k.source.kind.value == "generated"} \
        == {"one.sg0", "two.sg0"}
    x = np.random.default_rng(3).uniform(-4, 4, (1, 16, 8, 8)).astype(np.float16)
    result = api.simulate(program, {"x": x})
    m = run_block(graphs["one"], {"x": x})["m"]
    assert_close(result.outputs["y"], run_block(graphs["two"], {"m": m})["y"], ulps=2)


def test_many_blocks_keep_within_the_physical_barriers():
    """Twelve chained blocks need far more virtual barriers than NPU37XX's 64 physical
    ones; assign-physical-barriers reuses them (its replay proves the reuse deadlock
    free) and the chain still computes the right values."""
    blocks = []
    for k in range(12):
        src, dst = f"v{k}", f"v{k + 1}"
        blocks.append(f"graph @g{k} {{\n  %{src} = Parameter() : 1x32x16x16xf16 NCHW\n"
                      f"  %h = Constant(0.75) : f16\n  %m = Multiply(%{src}, %h)\n"
                      f"  %{dst} = Tanh(%m)\n  Result(%{dst})\n}}\n")
    graphs, program = compiled("module @long arch NPU37XX\n" + "".join(blocks))
    arch = load_arch("NPU37XX")
    assert len(program.module.barriers) > arch.barriers
    assert all(b.physical is not None and 0 <= b.physical < arch.barriers
               for b in program.module.barriers)
    v = np.random.default_rng(4).uniform(-2, 2, (1, 32, 16, 16)).astype(np.float16)
    result = api.simulate(program, {"v0": v})
    assert not result.result.races
    for k in range(12):
        v = run_block(graphs[f"g{k}"], {f"v{k}": v})[f"v{k + 1}"]
    assert_close(result.outputs["v12"], v, ulps=2)


def test_blob_and_inspect_show_every_block_and_the_hand_written_tasks(tmp_path, capsys):
    blob = tmp_path / "graph_blocks.blob"
    assert main(["compile", str(EXAMPLE), "-o", str(blob)]) == 0
    program = api.read_blob(blob.read_bytes())
    labels = {t.label for tl in program.module.task_lists for t in tl.tasks}
    assert {"load_in", "store_x", "load_h", "store_out", "clamp", "gelu"} <= labels
    assert {label.split(".")[0] for label in labels if "." in label} \
        == {"features", "head", "side"}
    capsys.readouterr()
    assert main(["inspect", str(blob)]) == 0
    shown = capsys.readouterr().out
    for name in ("%features.pooled.in.c0", "%head.pooled.t0s0", "%side.in.t0s0", "%x_cmx:",
                 "%pooled: 1x16x8x8xf16 ddr", "%out : ", "%side : ", "] gelu: sw @gelu",
                 "] head.s0.0.0: sw @head.sg0", "] load_h: dma"):
        assert name in shown, name


def test_a_user_name_a_block_program_uses_is_an_error_at_its_declaration():
    text = ("module @m arch NPU37XX\n"
            "ddr %main.x.b0 : 1x16xf16\n"
            "graph @main {\n  %x = Parameter() : 1x16x8x8xf16 NCHW\n  %y = Relu(%x)\n"
            "  Result(%y)\n}\n")
    with pytest.raises(VpucError) as err:
        compiled(text)
    diag = err.value.diagnostics[0]
    assert (diag.loc.line, diag.loc.col) == (2, 1)
    assert "%main.x.b0 is a name graph @main's lowering uses" in diag.message


def test_layer_lines_follow_each_block_prefix():
    """Each block's layer keys move under its name with its task labels, so every task
    finds the ONNX nodes of its own block, and a hand-written task none."""
    from vpuc.ir.provenance import LayerIndex
    text = ("module @m arch NPU37XX\n"
            "ddr %h : 1x16x4x4xf16 NCHW\noutput %out : 1x16x4x4xf16 NCHW\n"
            "barrier %ready\n"
            "tasks DMA {\n  drain: dma %h -> %out channel 0 waits(%ready)\n}\n"
            "graph @a {\n  %x = Parameter() : 1x16x4x4xf16 NCHW\n"
            '  %g = Relu(%x) from "relu_a" Relu\n  Result(%g)\n}\n'
            "graph @b updates(%ready) {\n  %g = Parameter() : 1x16x4x4xf16 NCHW\n"
            '  %h = Sigmoid(%g) from "sig_b" Sigmoid\n  Result(%h)\n}\n')
    _, program = compiled(text)
    index = LayerIndex(program.module.layers)
    seen = {}
    for tl in program.module.task_lists:
        for task in tl.tasks:
            layer = index.layer(task.label)
            seen[task.label.split(".")[0]] = {n.name for n in layer.nodes} if layer else set()
    assert seen == {"a": {"relu_a"}, "b": {"sig_b"}, "drain": set()}
    x = np.random.default_rng(5).uniform(-3, 3, (1, 16, 4, 4)).astype(np.float16)
    result = api.simulate(program, {"x": x})
    want = (1 / (1 + np.exp(-np.maximum(x.astype(np.float32), 0)))).astype(np.float16)
    assert_close(result.outputs["out"], want, ulps=2)


def test_lowered_rules_leave_hand_written_tasks_to_their_authors():
    """The DPU channel rule holds lowered programs to the NPU compiler's alignment; beside
    a graph block, examples/dwconv_pool.vir's hand-written 8-channel dwconv variants (which
    the simulator's DPU takes) are not the lowering's and stay valid."""
    text = (ROOT / "examples" / "dwconv_pool.vir").read_text() + (
        "graph @extra {\n  %q = Parameter() : 1x16x8x8xf16 NCHW\n  %r = Sigmoid(%q)\n"
        "  Result(%r)\n}\n")
    graphs, program = compiled(text)
    assert program.module.attributes["graph-blocks"] == "extra"
    q = np.random.default_rng(6).uniform(-3, 3, (1, 16, 8, 8)).astype(np.float16)
    x = np.random.default_rng(7).uniform(-1, 1, (1, 16, 64, 64)).astype(np.float32)
    result = api.simulate(program, {"q": q, "in": x})
    assert not result.result.races
    assert_close(result.outputs["r"], run_block(graphs["extra"], {"q": q})["r"], ulps=2)
