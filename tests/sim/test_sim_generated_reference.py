"""``vpuc run --reference`` on generated (fused) kernels: each kernel object records the
subgraph body it computes (``.note.vpuc.graph``), and every task running it is checked
against ``run_graph`` of that body, from the blob alone."""

from __future__ import annotations

import copy
import re
import subprocess
from functools import lru_cache

import numpy as np
import pytest

from runtime_sim.reference import Reference
from runtime_sim.simulator import simulate
from tests.sim.simlib import REPO, compile_vir, run_cli
from tests.tools import tool
from vpuc.blob import read_blob, write_blob
from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.kernel_graph import load_graphs
from vpuc.ir.module import KernelSourceKind
from vpuc.ir.tasks import Executor
from vpuc.passes.registry import compile_pipeline
from vpuc.shave import KernelObject
from vpuc.vir.parser import parse_file

EXAMPLES = {"fused_chain": REPO / "examples/fused_chain.vir",
            "fused_broadcast": REPO / "tests/sim/data/fused_broadcast.vir"}
# A constant of each program, and what to flip it to so that the recorded graph disagrees
FLIPS = {"fused_chain": ("Constant(0.125)", "Constant(0.25)"),
         "fused_broadcast": ("Constant(0.5)", "Constant(0.75)")}
SUMMARY = re.compile(r"generated kernels: (\d+) ACT SHAVE tasks? checked against the graph "
                     r"their kernel records \((\d+) kernels?\): (.*)")
FORMATS = ("fb", "elf")


@lru_cache(maxsize=None)
def _program(name: str):
    path = EXAMPLES[name]
    return compile_vir(path, ",".join(compile_pipeline(parse_file(str(path)))))


def program(name: str):
    return copy.deepcopy(_program(name))


def generated_tasks(prog) -> tuple[int, int]:
    """(ACT SHAVE tasks running a generated kernel, generated kernels used)."""
    kernels = {k.name: k for k in prog.module.kernels}
    act = next(tl for tl in prog.module.task_lists if tl.executor is Executor.ACT_SHAVE)
    used = [t.kernel for t in act.tasks
            if kernels[t.kernel].source.kind is KernelSourceKind.GENERATED]
    return len(used), len(set(used))


def rewrite_graph(prog, kernel: str, text: str) -> None:
    """Replace the graph kernel ``kernel``'s object records (a compiler bug, simulated)."""
    image = prog.kernels[kernel]
    obj = KernelObject.from_elf(image.elf)
    obj.graph = text
    image.elf, image.graph = obj.to_elf(), text


def write(tmp_path, prog, fmt: str):
    path = tmp_path / f"net.{fmt}"
    path.write_bytes(write_blob(prog, fmt))
    return path


# ------------------------------------------------------------------ recording the graph

@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_generated_kernel_records_its_body(name):
    prog = program(name)
    generated = [k.name for k in prog.module.kernels
                 if k.source.kind is KernelSourceKind.GENERATED]
    assert generated
    for kernel in generated:
        image = prog.kernel_image(kernel)
        assert image.graph.startswith(f"module @{kernel} ") and f"graph @{kernel} {{" in image.graph
        assert KernelObject.from_elf(image.elf).graph == image.graph
    library = [k.name for k in prog.module.kernels if k.source.kind is KernelSourceKind.LIBRARY]
    assert all(prog.kernel_image(k).graph is None for k in library if k in prog.kernels)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_blob_reader_surfaces_the_recorded_graph(name, fmt):
    prog = program(name)
    read = read_blob(write_blob(prog, fmt), f"x.{fmt}")
    assert {k: img.graph for k, img in read.kernels.items()} == \
        {k: img.graph for k, img in prog.kernels.items()}


def test_repeated_compiles_are_byte_identical():
    first = [write_blob(compile_vir(EXAMPLES["fused_broadcast"],
                                    ",".join(compile_pipeline(parse_file(
                                        str(EXAMPLES["fused_broadcast"]))))), fmt)
             for fmt in FORMATS]
    again = [write_blob(program("fused_broadcast"), fmt) for fmt in FORMATS]
    assert first == again


def test_readelf_reads_the_generated_object_silently(tmp_path):
    image = program("fused_chain").kernels["main.sg0"]
    path = tmp_path / "main.sg0.o"
    path.write_bytes(image.elf)
    done = subprocess.run([tool("readelf"), "-a", "-W", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
    assert ".note.vpuc.graph" in done.stdout
    assert "VPUC" in done.stdout and "Unknown note type: (0x00000010)" in done.stdout


def test_inspect_shows_what_a_generated_kernel_computes(tmp_path, capsys, monkeypatch):
    prog = program("fused_broadcast")
    blob = write(tmp_path, prog, "elf")
    code, out, err = run_cli(["inspect", blob, "--kernel", "g.sg1"], capsys, monkeypatch)
    assert code == 0 and err == ""
    block = out[out.index("  computes (the graph recorded in .note.vpuc.graph):"):]
    assert "    graph @g.sg1 {" in block and "      %e = Subtract(%m, %c)" in block
    assert block.index("computes") < block.index("disassembly of .text")
    obj = tmp_path / "k.o"
    obj.write_bytes(prog.kernels["g.sg0"].elf)
    code, out, _ = run_cli(["inspect", obj], capsys, monkeypatch)
    assert code == 0 and "computes (the graph recorded in .note.vpuc.graph):" in out
    assert "  %d = Add(%a, %bias)" in out
    code, out, _ = run_cli(["inspect", blob, "--json"], capsys, monkeypatch)
    assert code == 0 and '"graph": "module @g.sg0 arch NPU37XX\\n' in out
    assert '"graph": null' in out           # the library softmax and runtime record none


# ------------------------------------------------------------------ checking

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_reference_checks_every_generated_task(name, fmt, tmp_path, capsys, monkeypatch):
    prog = program(name)
    tasks, kernels = generated_tasks(prog)
    code, out, err = run_cli(["run", write(tmp_path, prog, fmt), "--reference"],
                             capsys, monkeypatch)
    assert code == 0, out + err
    match = SUMMARY.search(out)
    assert match, out
    assert (int(match[1]), int(match[2])) == (tasks, kernels) and tasks >= 16
    assert match[3].startswith("all match")
    outputs = [line for line in out.splitlines() if line.startswith("output %")]
    assert outputs and all("matches the numpy reference" in line for line in outputs)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_kernel_disagreeing_with_its_graph_is_a_mismatch(name, fmt, tmp_path, capsys,
                                                           monkeypatch):
    prog = program(name)
    old, new = FLIPS[name]
    kernel = next(k for k, img in sorted(prog.kernels.items())
                  if img.graph is not None and old in img.graph)
    rewrite_graph(prog, kernel, prog.kernels[kernel].graph.replace(old, new))
    code, out, err = run_cli(["run", write(tmp_path, prog, fmt), "--reference"],
                             capsys, monkeypatch)
    assert code == 1 and "Traceback" not in err
    tasks, _ = generated_tasks(prog)
    act = next(tl for tl in prog.module.task_lists if tl.executor is Executor.ACT_SHAVE)
    flipped = sum(1 for t in act.tasks if t.kernel == kernel)
    assert re.search(rf"\): {flipped:,} of {tasks:,} differ$", SUMMARY.search(out)[0])
    lines = [line for line in out.splitlines() if line.startswith("task ")]
    assert len(lines) == min(flipped, 20)
    first = re.fullmatch(rf"task (\S+) \(@{re.escape(kernel)} on tile \d\): output %\S+ "
                         r"\(out0\): [\d,]+ of [\d,]+ elements differ from the recorded graph "
                         r"\(rtol \S+, atol \S+\); worst at \[[\d, ]+\]: got \S+, expected \S+ "
                         r"\(\|diff\| \S+\)", lines[0])
    assert first, lines[0]


def test_rtol_and_atol_override_the_kernel_tolerance(tmp_path, capsys, monkeypatch):
    prog = program("fused_chain")
    rewrite_graph(prog, "main.sg0", prog.kernels["main.sg0"].graph.replace(
        "Constant(0.125)", "Constant(0.1875)"))
    blob = write(tmp_path, prog, "elf")
    code, out, _ = run_cli(["run", blob, "--reference"], capsys, monkeypatch)
    assert code == 1 and "16 of 16 differ" in out
    code, out, _ = run_cli(["run", blob, "--reference", "--atol", "0.05"], capsys, monkeypatch)
    assert code == 0 and SUMMARY.search(out)[3].startswith("all match")


def test_reference_api_runs_generated_kernels_op_by_op():
    prog = program("fused_broadcast")
    result = simulate(prog)
    expected = Reference(prog, graphs=load_graphs(prog)).run(result.inputs)
    for name, value in expected.items():
        assert np.allclose(result.outputs[name].astype(np.float32), value.astype(np.float32),
                           rtol=4e-3, atol=1e-4)


def test_dynamic_shapes_are_read_from_the_dims_the_kernel_wrote(tmp_path, capsys, monkeypatch):
    path = tmp_path / "dyn.vir"
    path.write_text("module @dyn arch NPU37XX\ngraph @g {\n"
                    "  %x = Parameter() : 1x?<=64x40xf16\n  %y = Sigmoid(%x)\n"
                    "  %z = Abs(%y)\n  Result(%z)\n}\n")
    prog = compile_vir(path, ",".join(compile_pipeline(parse_file(str(path)))))
    code, out, err = run_cli(["run", write(tmp_path, prog, "fb"), "--reference", "--input",
                              "x=1x37x40xf16=0.5"], capsys, monkeypatch)
    assert code == 0, out + err
    assert SUMMARY.search(out)[1] == "1" and "all match" in out


# ------------------------------------------------------------------ bad records

def test_a_graph_that_does_not_parse_is_a_clear_error(tmp_path, capsys, monkeypatch):
    prog = program("fused_chain")
    rewrite_graph(prog, "main.sg0", prog.kernels["main.sg0"].graph.replace(
        "Sigmoid(%clipped)", "Sigmoid(%clipped"))
    blob = write(tmp_path, prog, "fb")
    code, out, err = run_cli(["run", blob, "--reference"], capsys, monkeypatch)
    assert code == 1 and "Traceback" not in err
    assert f"{blob}:@main.sg0:.note.vpuc.graph:" in err
    assert ("kernel @main.sg0: the graph recorded in its kernel object (section "
            ".note.vpuc.graph) is not valid VIR") in err
    assert "Sigmoid(%clipped :" in err                 # the offending line, with a caret
    code, _, err = run_cli(["run", blob], capsys, monkeypatch)   # runs without --reference
    assert code == 0 and err == ""


def test_a_graph_with_another_contract_is_a_clear_error(tmp_path, capsys, monkeypatch):
    prog = program("fused_chain")
    graph = prog.kernels["main.sg0"].graph
    rewrite_graph(prog, "main.sg0", graph.replace("Result(%y)", "Result(%y)\n  Result(%act)"))
    code, _, err = run_cli(["run", write(tmp_path, prog, "elf"), "--reference"],
                           capsys, monkeypatch)
    assert code == 1 and "Traceback" not in err
    assert "does not match the kernel's contract" in err and "out1: memref<" in err


def test_malformed_graph_notes_name_the_kernel_and_section(tmp_path, capsys, monkeypatch):
    prog = program("fused_chain")
    image = prog.kernels["main.sg0"]
    note = image.elf.index(b"VPUC\0") - 12               # the note header
    for patch, message in ((b"\xff\xff\x00\x00", "runs past the end of the section"),
                           (None, "the graph note's text is not UTF-8")):
        elf = bytearray(image.elf)
        if patch is None:
            elf[note + 20] = 0xFF                         # first byte of the text
        else:
            elf[note + 4:note + 8] = patch                # n_descsz
        broken = copy.deepcopy(prog)
        broken.kernels["main.sg0"].elf = bytes(elf)
        with pytest.raises(VpucError) as info:
            KernelObject.from_elf(bytes(elf), "k.o")
        assert message in info.value.render() and ".note.vpuc.graph" in info.value.render()
        blob = write(tmp_path, broken, "elf")
        code, _, err = run_cli(["run", blob], capsys, monkeypatch)
        assert code == 1 and "Traceback" not in err
        assert "kernel @main.sg0's object" in err and ".note.vpuc.graph" in err and message in err


def test_a_generated_kernel_without_a_record_has_no_reference(tmp_path, capsys, monkeypatch):
    prog = program("fused_chain")
    rewrite_graph(prog, "main.sg0", None)             # as an older vpuc wrote them
    blob = write(tmp_path, prog, "fb")
    code, out, err = run_cli(["run", blob, "--reference"], capsys, monkeypatch)
    assert code == 1 and "Traceback" not in err
    assert "which has no numpy reference" in err and "--expected" in err
    assert not SUMMARY.search(out)
