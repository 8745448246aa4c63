"""vpuc inspect: every blob in both formats, JSON with the same content, filters,
kernel objects, and the command-line glue."""

import argparse
import json

import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled

from vpuc.blob import inspect_blob, inspect_kernel_object, write_blob
from vpuc.blob.cli_inspect import add_inspect_parser
from vpuc.blob.inspect import inspect_file
from vpuc.diagnostics import UsageError, VpucError
from vpuc.ir.tasks import SwKernelTask
from vpuc.shave import assemble

CLAMP = REPO / "examples" / "clamp.vir"


@pytest.mark.parametrize("fmt", ["fb", "elf"])
@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_every_blob_inspects_as_text_and_json(source, fmt):
    program = compiled(source)
    data = write_blob(program, fmt, {"format": fmt})
    text = inspect_blob(data, f"x.{fmt}")
    report = json.loads(inspect_blob(data, f"x.{fmt}", json=True))
    module = program.module
    assert f"module @{module.name}" in text and "verifies: ok" in text
    assert report["verifies"] == "ok" and report["header"]["options"] == {"format": fmt}
    assert report["header"]["provenance"] == program.provenance
    assert [b["name"] for b in report["barriers"]] == [b.name for b in module.barriers]
    for task_list, listed in zip(module.task_lists, report["task_lists"]):
        assert [t["label"] for t in listed["tasks"]] == [t.label for t in task_list.tasks]
        for task in task_list.tasks:
            if task.label:
                assert f"{task.label}: " in text
    assert [k["name"] for k in report["kernels"]] == [k.name for k in module.kernels]
    assert {k["name"] for k in report["kernels"] if k["image"]} == set(program.kernels)
    for kernel in report["kernels"]:
        assert f"kernel @{kernel['name']}(" in text
        if kernel["image"] is None:
            continue
        assert any(s["name"] == ".text" for s in kernel["image"]["elf_sections"])
        assert kernel["image"]["disassembly"] is None        # only with --kernel
    assert "disassembly of .text" not in text
    assert len(report["tensors"]) == len(module.buffers) + len(module.views)
    assert [c["tensor"] for c in report["constants"]] == list(program.constants)
    for const in report["constants"]:
        assert const["bytes"] == len(program.constants[const["tensor"]])
    runtime = module.runtime
    assert (report["runtime"] is None) == (runtime is None)
    if runtime is not None:
        assert report["runtime"] == {"kernel": runtime.kernel, "stack_sizes": list(runtime.stacks)}
    assert len(report["invocations"]) == len(program.invocations)
    for inv in report["invocations"]:
        assert inv["error"] is None
        memrefs = [a for a in inv["args"] if a["kind"] == "memref"]
        assert memrefs and all("dataAddr" in a and "numDims" in a for a in memrefs)
    assert report["total"] == len(data) and "total" in text


def test_invocation_args_are_decoded():
    report = json.loads(inspect_blob(write_blob(compiled(CLAMP), "fb"), "x", json=True))
    (inv,) = report["invocations"]
    first, second, low, high = inv["args"]
    assert (first["name"], first["dataAddr"], first["numDims"]) == ("input", 0x1F000000, 4)
    assert first["dims"] == [16, 32, 32, 1] and first["strides_bits"] == [16, 256, 8192, 262144]
    assert (low["value"], high["value"]) == (0.0, 6.0) and low["type"] == "f16"


def test_filters():
    data = write_blob(compiled(CLAMP), "elf")
    report = json.loads(inspect_blob(data, "x", json=True, task_list="dma"))
    assert [tl["executor"] for tl in report["task_lists"]] == ["DMA"]
    assert report["kernels"] == [] and report["invocations"] == []
    report = json.loads(inspect_blob(data, "x", json=True, task="store"))
    assert [t["label"] for tl in report["task_lists"] for t in tl["tasks"]] == ["store"]
    report = json.loads(inspect_blob(data, "x", json=True, task_list="ACT_SHAVE", task="0"))
    assert [k["name"] for k in report["kernels"]] == ["builtin_clamp"]
    assert len(report["invocations"]) == 1
    report = json.loads(inspect_blob(data, "x", json=True, kernel="runtime"))
    assert [k["name"] for k in report["kernels"]] == ["runtime"] and not report["invocations"]
    for bad in (dict(task_list="DPU"), dict(task="nope"), dict(kernel="nope")):
        with pytest.raises(UsageError):
            inspect_blob(data, "x", **bad)


def test_kernel_object_inspection():
    obj = assemble((REPO / "tests/unit/data/clamp_test.s").read_text(), "clamp_test.s")
    data = obj.to_elf()
    text = inspect_kernel_object(data, "clamp_test.o")
    assert "SHAVE kernel object" in text and ".text" in text and "clamp_test" in text
    report = json.loads(inspect_file(data, "clamp_test.o", json=True))
    assert {s["name"] for s in report["sections"]} >= {".text", ".symtab"}
    assert any(s["name"] == "clamp_test" and s["global"] for s in report["symbols"])
    assert report["disassembly"].strip()
    with pytest.raises(UsageError):
        inspect_file(data, "clamp_test.o", kernel="x")


def test_not_a_blob_is_a_clean_error(tmp_path):
    with pytest.raises(VpucError, match="not a vpuc blob"):
        inspect_file(b"plain text, not a blob", "notes.txt")
    elf = bytearray(write_blob(compiled(CLAMP), "elf"))
    elf[18:20] = (0x3E).to_bytes(2, "little")          # x86-64
    with pytest.raises(VpucError, match="neither a vpuc blob"):
        inspect_file(bytes(elf), "a.out")


def test_cli_glue(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="vpuc")
    add_inspect_parser(parser.add_subparsers(dest="command"))
    blob = tmp_path / "clamp.blob"
    blob.write_bytes(write_blob(compiled(CLAMP), "fb"))
    args = parser.parse_args(["inspect", str(blob), "--json", "--task-list", "DMA"])
    assert args.handler(args) == 0
    assert json.loads(capsys.readouterr().out)["task_lists"][0]["executor"] == "DMA"
    args = parser.parse_args(["inspect", str(tmp_path / "missing.blob")])
    with pytest.raises(VpucError, match="cannot read"):
        args.handler(args)


def test_sw_tasks_are_listed_with_bindings():
    program = compiled(CLAMP)
    text = inspect_blob(write_blob(program, "fb"), "x")
    task = next(t for tl in program.module.task_lists for t in tl.tasks
                if isinstance(t, SwKernelTask))
    assert f"sw @{task.kernel} on tile {task.tile} inputs(%in_cmx as %arg0)" in text


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_dpu_tasks_show_every_parameter_and_variant(fmt):
    program = compiled(REPO / "examples" / "graph_conv.vir")
    report = json.loads(inspect_blob(write_blob(program, fmt), "x", json=True))
    dpu_ir = next(tl for tl in program.module.task_lists if str(tl.executor) == "DPU").tasks
    dpu = next(tl for tl in report["task_lists"] if tl["executor"] == "DPU")["tasks"]
    # blocks the cost model chose, each a permute of the NCHW input and a conv
    blocks = len(dpu_ir) // 2
    assert len(dpu) == len(dpu_ir) and blocks >= 2
    assert [t["op"] for t in dpu] == ["permute", "conv"] * blocks
    for task, ir in zip(dpu[1::2], dpu_ir[1::2]):
        assert (task["kernel"], task["stride"], task["pad"], task["dilation"]) == \
            (list(ir.kernel), list(ir.stride), list(ir.pad), list(ir.dilation))
        assert task["post_op"] == {"kind": str(ir.post.kind), "params": list(ir.post.params)}
        assert [(v["start"], v["end"], v["waits"], v["updates"]) for v in task["variants"]] == \
            [(list(v.start), list(v.end), list(v.waits), list(v.updates)) for v in ir.variants]
    assert task["pad"] == [0, 1, 1, 1] and task["post_op"]["kind"] == "relu"
    text = inspect_blob(write_blob(program, fmt), "x")
    assert "      kernel 3x3, stride 1x1, dilation 1x1, pad top 0 bottom 1 left 1 right 1, " \
           "post relu\n" in text
    last = dpu_ir[-1].variants[-1]
    height = last.end[1] - last.start[1] + 1
    assert (f"      variant -: x 0..31, y {last.start[1]}..{last.end[1]}, z 0..15 "
            f"(W x H x C = 32x{height}x16) mode {last.mode}\n") in text


def test_act_tasks_show_scalars_run_args_and_contracts():
    report = json.loads(inspect_blob(write_blob(compiled(CLAMP), "elf"), "x", json=True))
    (task,) = next(tl for tl in report["task_lists"] if tl["executor"] == "ACT_SHAVE")["tasks"]
    assert task["scalars"] == [{"name": "minVal", "type": "f16", "value": 0.0},
                               {"name": "maxVal", "type": "f16", "value": 6.0}]
    assert task["run_args"] == ["arg0", "arg1", "minVal", "maxVal"]
    clamp = next(k for k in report["kernels"] if k["name"] == "builtin_clamp")
    assert (clamp["source"], clamp["source_ref"]) == ("library", "clamp")
    assert [(p["name"], p["kind"]) for p in clamp["params"]] == [
        ("input", "memref"), ("output", "memref"), ("minVal", "scalar"), ("maxVal", "scalar")]
    assert report["runtime"] == {"kernel": "runtime", "stack_sizes": [16384, 16384]}


def test_constants_carry_shape_dtype_bytes_and_hash():
    import hashlib
    program = compiled(REPO / "examples" / "graph_conv.vir")
    report = json.loads(inspect_blob(write_blob(program, "fb"), "x", json=True))
    assert report["constants"]
    for const in report["constants"]:
        data = program.constants[const["tensor"]]
        assert const["bytes"] == len(data)
        assert const["sha256"] == hashlib.sha256(data).hexdigest()
        assert const["dtype"] in ("f16", "f32") and const["shape"]


def test_disassembly_only_with_kernel_and_not_with_no_disasm():
    data = write_blob(compiled(CLAMP), "fb")
    assert "disassembly of .text" not in inspect_file(data, "x")
    shown = inspect_file(data, "x", kernel="builtin_clamp")
    assert "  disassembly of .text (linked for WIN_D):" in shown
    assert "disassembly of .text" not in inspect_file(data, "x", kernel="builtin_clamp",
                                                      no_disasm=True)
    obj = assemble((REPO / "tests/unit/data/clamp_test.s").read_text(), "clamp_test.s").to_elf()
    assert "disassembly:" in inspect_file(obj, "k.o")
    report = json.loads(inspect_file(obj, "k.o", json=True, no_disasm=True))
    assert report["disassembly"] is None
