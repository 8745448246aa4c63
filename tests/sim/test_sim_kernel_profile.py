"""``vpuc run --kernel-profile``: ACT SHAVE cycles per LIR expression, from the expression tags
a generated kernel records in its object (``.note.vpuc.graph``), exact to the cycle."""

from __future__ import annotations

import copy
import csv
import io
import re
import subprocess
from functools import lru_cache

import pytest

from runtime_sim.plan import ACT
from runtime_sim.simarch import load_sim_arch
from runtime_sim.simulator import simulate
from tests.sim.simlib import REPO, ROUND, compile_vir, run_cli
from tests.tools import tool
from vpuc.blob import read_blob, write_blob
from vpuc.diagnostics import VpucError
from vpuc.passes.registry import compile_pipeline
from vpuc.shave import KernelObject
from vpuc.shave.kernel_notes import (NO_LABEL, ExprTags, object_notes, read_notes,
                                     tags_note)
from vpuc.vir.parser import parse_file

CHAIN = REPO / "examples/fused_chain.vir"
BROADCAST = REPO / "tests/sim/data/fused_broadcast.vir"
FORMATS = ("fb", "elf")
CHAIN_KINDS = ["Scalar", "Scalar", "LoopBegin", "Load", "FMA", "HSwish", "Clamp", "Sigmoid",
               "Store"]


@lru_cache(maxsize=None)
def _blob(path, fmt: str) -> bytes:
    program = compile_vir(path, ",".join(compile_pipeline(parse_file(str(path)))))
    return write_blob(program, fmt)


def program(path, fmt: str = "fb"):
    return read_blob(_blob(path, fmt), f"net.{fmt}")


def charged(result, kernel: str) -> list[int]:
    """The SHAVE cycles the simulation charged each ACT task of ``kernel``, from its timeline
    (round.toml: SHAVE clock = NCE clock, a 20-cycle dispatch)."""
    plan, timeline, arch = result.plan, result.timeline, result.arch
    assert arch.shave_cycle == 1.0
    out = []
    for u in range(plan.size):
        if plan.kind[u] == ACT and plan.work[u].kernel == kernel:
            cycles = timeline.end[u] - timeline.start[u] - arch.dispatch["ACT_SHAVE"]
            assert cycles == int(cycles)
            out.append(int(cycles))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_expression_cycles_add_up_to_the_simulated_shave_cycles(fmt):
    prog = program(CHAIN, fmt)
    result = simulate(prog, load_sim_arch(str(ROUND)), kernel_profile=True, races=False)
    (kernel,) = result.kernel_profile.kernels
    tasks = charged(result, "main.sg0")
    assert (kernel.kernel, kernel.origin, kernel.tasks) == ("main.sg0", "generated", 16)
    assert kernel.cycles == sum(tasks) == sum(e.cycles for e in kernel.expressions) > 0
    assert kernel.profiled == 1                        # every task has the same dims
    labels = [e.label for e in kernel.expressions]
    assert labels[0] == "prologue" and labels[-1] == "epilogue"
    assert [label.split(" ", 1)[1] for label in labels[1:-1]] == CHAIN_KINDS
    assert all(re.fullmatch(r"e\d+ \w+", label) for label in labels[1:-1])
    by_kind = {e.label.split(" ", 1)[-1]: e for e in kernel.expressions}
    # the most cycles go to an activation: which one depends on where the schedule puts
    # the instructions that advance the issue clock (Sigmoid's unpipelined vexp, vrcp)
    heaviest = max(kernel.expressions, key=lambda e: e.cycles)
    assert heaviest.label.endswith(("HSwish", "Sigmoid")) and heaviest in by_kind.values()
    assert all(by_kind[k].instructions >= 16 * 8192 for k in ("Load", "FMA", "Store"))
    # the activations (several instructions each, long latencies) take at least their
    # share of the instructions run: the cheap loads, FMAs and stores co-issue beside them
    activation = [e for e in kernel.expressions if e.label.endswith(("HSwish", "Sigmoid", "Clamp"))]
    assert sum(e.cycles for e in activation) / kernel.cycles \
        >= sum(e.instructions for e in activation) / sum(e.instructions for e in kernel.expressions)


def test_profiles_are_identical_across_formats_and_runs():
    texts = [simulate(program(CHAIN, fmt), kernel_profile=True, races=False,
                      timing_only=True).kernel_profile for fmt in FORMATS]
    assert texts[0] == texts[1] and texts[0].text() == texts[1].text()
    again = [simulate(program(BROADCAST), kernel_profile=True, races=False).kernel_profile
             for _ in range(2)]
    assert again[0] == again[1] and again[0].csv() == again[1].csv()
    timing = simulate(program(BROADCAST), kernel_profile=True, timing_only=True).kernel_profile
    assert timing == again[0]


def test_cli_prints_the_profile_after_the_summary(tmp_path, capsys, monkeypatch):
    blob = tmp_path / "net.elf"
    blob.write_bytes(_blob(BROADCAST, "elf"))
    table = tmp_path / "profile.csv"
    code, out, err = run_cli(["run", blob, "--kernel-profile", "--kernel-profile-csv", table],
                             capsys, monkeypatch)
    assert code == 0 and err == ""
    head = "ACT SHAVE cycles per LIR expression (SHAVE clock, summed over each kernel's tasks):"
    assert out.index("critical path") < out.index(head)
    lines = out[out.index(head):].splitlines()
    assert re.fullmatch(r"@g\.sg0 \(generated\): 8 tasks, [\d,]+ cycles, 1 distinct invocation "
                        r"profiled", lines[1])
    assert lines[2].split() == ["expression", "cycles", "share", "instructions"]
    assert re.fullmatch(r"  prologue +[\d,]+ +\d+\.\d% +[\d,]+", lines[3])
    assert re.search(r"^@softmax_f16 \(library \"softmax\"\): 8 tasks, [\d,]+ cycles "
                     r"\(no expression tags\)$", out, re.M)
    assert re.search(r"^  e\d+ Tanh ", out, re.M) and re.search(r"^  e\d+ FMA ", out, re.M)
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    for kernel in ("g.sg0", "g.sg1"):
        mine = [r for r in rows if r["kernel"] == kernel]
        assert sum(int(r["cycles"]) for r in mine) == int(mine[0]["kernel_cycles"])
        assert abs(sum(float(r["share"]) for r in mine) - 1) < 1e-4
    (softmax,) = [r for r in rows if r["kernel"] == "softmax_f16"]
    assert softmax["expression"] == "" and softmax["cycles"] == softmax["kernel_cycles"]
    code, out, _ = run_cli(["run", blob], capsys, monkeypatch)       # off by default
    assert code == 0 and head not in out


def test_a_profile_disagreeing_with_the_simulation_is_an_internal_error(monkeypatch):
    import runtime_sim.isa.pc_cycles as pc_cycles
    real = pc_cycles.run_per_pc

    def off_by_one(*args, **kwargs):
        run = real(*args, **kwargs)
        run.cycles += 1
        return run
    monkeypatch.setattr(pc_cycles, "run_per_pc", off_by_one)
    with pytest.raises(VpucError, match=r"internal: .*kernel @g\.sg\d took [\d,]+ SHAVE cycles "
                                        r"in the simulation, its per-expression profile"):
        simulate(program(BROADCAST), kernel_profile=True, races=False)


def test_no_act_tasks_no_profile():
    prog = compile_vir(REPO / "tests/sim/data/one_dma.vir")
    assert simulate(prog, kernel_profile=True).kernel_profile.text().endswith(
        "  no ACT SHAVE task ran\n")
    assert simulate(prog).kernel_profile is None


# ------------------------------------------------------------------ the record


def test_tags_roundtrip_run_length():
    per = ["prologue"] * 3 + [None] + ["e2 Load"] * (0x10000 + 5) + ["prologue"]
    tags = ExprTags.from_instructions(per, ["e2 Load", "prologue", "e9 unused"])
    assert tags.labels == ("e2 Load", "prologue")
    assert tags.runs == ((3, 1), (1, NO_LABEL), (0xFFFF, 0), (6, 0), (1, 1))
    assert tags.instructions == len(per) and tags.starts()[3] == "(no expression)"
    assert read_notes(tags_note(tags), "k.o", len(per)).tags == tags


def test_the_generated_object_records_its_tags():
    prog = program(BROADCAST)
    for name in ("g.sg0", "g.sg1"):
        image = prog.kernels[name]
        obj = KernelObject.from_elf(image.elf)
        assert obj.tags == image.tags and obj.tags.instructions == len(image.text) // 8
        assert obj.to_elf() == image.elf
    assert prog.kernels["softmax_f16"].tags is None


def _broken(image, offset: int, patch: bytes) -> bytes:
    """The object with ``patch`` at ``offset`` of its tags note's descriptor."""
    elf = bytearray(image.elf)
    note = elf.index(b"VPUC\0", elf.index(b"VPUC\0") + 1) - 12      # the second note
    elf[note + 20 + offset:note + 20 + offset + len(patch)] = patch
    return bytes(elf)


def _chain_instructions() -> int:
    return len(program(CHAIN, "elf").kernels["main.sg0"].text) // 8


@pytest.mark.parametrize("offset, patch, message", [
    (0, lambda n: (n + 1).to_bytes(4, "little"),
     lambda n: f"the runs cover {n} instructions, the header says {n + 1}"),
    (4, (1 << 20).to_bytes(4, "little"), "1048576 runs do not fit its"),
    (12, b"\0\0", "run 0 has count 0 and label 0"),
    (14, b"\x0b\0", "run 0 has count 2 and label 11"),
])
def test_a_corrupt_tags_note_is_a_clear_error(offset, patch, message, tmp_path, capsys,
                                              monkeypatch):
    prog = program(CHAIN, "elf")
    n = _chain_instructions()          # the generated kernel's, whatever the generator emits
    patch = patch(n) if callable(patch) else patch
    message = message(n) if callable(message) else message
    broken = copy.deepcopy(prog)
    broken.kernels["main.sg0"].elf = _broken(prog.kernels["main.sg0"], offset, patch)
    with pytest.raises(VpucError, match=re.escape(message)) as info:
        KernelObject.from_elf(broken.kernels["main.sg0"].elf, "k.o")
    assert "section .note.vpuc.graph at offset 0x" in info.value.render()
    for fmt in FORMATS:
        blob = tmp_path / f"net.{fmt}"
        blob.write_bytes(write_blob(broken, fmt))
        code, _, err = run_cli(["run", blob, "--kernel-profile"], capsys, monkeypatch)
        assert code == 1 and "Traceback" not in err
        assert re.search(r"kernel @main\.sg0's object: section \.note\.vpuc\.graph at offset "
                         r"0x[0-9a-f]+: error: expression-tags note: ", err), err
        assert message in err


def test_blob_reader_checks_tags_against_text():
    image = program(CHAIN).kernels["main.sg0"]
    n = _chain_instructions()
    with pytest.raises(VpucError, match=f"covers {n} instructions; .text holds {n - 1}"):
        object_notes(image.elf, "k.o", n - 1)


def test_readelf_reads_the_tags_note_silently(tmp_path):
    path = tmp_path / "main.sg0.o"
    path.write_bytes(program(CHAIN).kernels["main.sg0"].elf)
    done = subprocess.run([tool("readelf"), "-a", "-W", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
    assert "Unknown note type: (0x00000010)" in done.stdout
    assert "Unknown note type: (0x00000011)" in done.stdout


def test_inspect_annotates_the_disassembly(tmp_path, capsys, monkeypatch):
    blob = tmp_path / "net.fb"
    blob.write_bytes(_blob(BROADCAST, "fb"))
    code, out, err = run_cli(["inspect", blob, "--kernel", "g.sg1"], capsys, monkeypatch)
    assert code == 0 and err == ""
    tagged = re.search(r"^  expression tags \(\.note\.vpuc\.graph\): (\d+) instructions in \d+ "
                       r"runs of \d+ labels; '# label' in the disassembly starts a run$", out, re.M)
    text = KernelObject.from_elf(program(BROADCAST).kernels["g.sg1"].elf, "g.sg1").text
    assert tagged and int(tagged.group(1)) == len(text) // 8     # one tag per instruction
    assert re.search(r"^        \S.* +# prologue$", out, re.M)
    assert re.search(r"^        v\S+ .* +# e\d+ Tanh$", out, re.M)
    code, out, _ = run_cli(["inspect", blob, "--json"], capsys, monkeypatch)
    assert code == 0 and '"tags": null' in out and '"label": "epilogue"' in out
