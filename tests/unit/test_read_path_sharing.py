"""What reading a blob shares or skips must not change what the verifier finds:
packed reference locations, barrier counts without the schedule's units, and the
shape rules worked out once per shape (DPU tasks) or per bound types (run() wiring)."""

import pickle
import sys
from pathlib import Path

from vpuc.analysis.schedule import Schedule
from vpuc.arch import load_arch
from vpuc.diagnostics import UNKNOWN_LOC, BinLoc, Loc
from vpuc.ir.module import Ref
from vpuc.verifier import verify_module
from vpuc.verifier.barriers import barrier_use_counts
from vpuc.vir.parser import parse_text

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_program import generate  # noqa: E402


def test_ref_location_packs_and_unpacks():
    ref = Ref("x0_0", Loc("dir/prog.vir", 123456, 77))
    assert ref == "x0_0" and hash(ref) == hash("x0_0")
    assert ref.loc == Loc("dir/prog.vir", 123456, 77)
    assert pickle.loads(pickle.dumps(ref)).loc == ref.loc
    assert Ref("y").loc is UNKNOWN_LOC
    # what does not pack is kept as given
    for odd in (None, BinLoc("b", "section", 4), Loc("f", -1, 2), Loc("f", 1 << 40, 1)):
        assert Ref("z", odd).loc == odd


def test_parsed_refs_keep_their_locations():
    module = parse_text(generate(8), "gen.vir")
    task = module.task_lists[0].tasks[0]
    assert (task.src.loc.file, task.src.loc.line) == ("gen.vir", task.loc.line)
    assert task.src.loc.col > task.loc.col


DPU_BARRIERS = """module @m arch NPU37XX
cmx %a : 1x16x4x4xf16 NHWC tile 0 at 0
cmx %b : 1x16x4x4xf16 NHWC tile 0 at 1024
cmx %c : 1x16x4x4xf16 NHWC tile 0 at 2048
barrier %p
barrier %q
barrier %r
tasks DMA {
  d0: dma %a -> %b updates(%p, %q)
  d1: dma %b -> %c waits(%r) updates(%r, %r)
}
tasks DPU {
  e0: dpu add on tile 0 in(%a, %b) out(%c) waits(%p) updates(%r) {
    variant start(0, 0, 0) end(3, 1, 15) waits(%p, %q)
    variant start(0, 2, 0) end(3, 3, 15) waits(%q, %q)
  }
}
"""


def test_barrier_counts_match_the_schedule():
    arch = load_arch("NPU37XX")
    for module in (parse_text(generate(40), "gen.vir"), parse_text(DPU_BARRIERS, "m.vir")):
        schedule = Schedule(module, arch, order=False)
        producers, consumers = barrier_use_counts(module)
        assert producers == {b: len(u) for b, u in schedule.producers.items()}
        assert consumers == {b: len(u) for b, u in schedule.consumers.items()}


def _messages(text: str, schedule_rules: bool) -> list[str]:
    module = parse_text(text, "m.vir")
    bag = verify_module(module, schedule_rules=schedule_rules)
    return sorted(f"{d.loc}: {d.message}" for d in bag.items)


def test_a_waited_never_updated_barrier_names_its_waiter_without_the_schedule():
    text = DPU_BARRIERS.replace("updates(%p, %q)", "updates(%q)")
    found = [m for m in _messages(text, schedule_rules=False) if "never updated" in m]
    assert len(found) == 1 and "%p" in found[0] and "d0" not in found[0] and "e0.v0" in found[0]
    assert found == [m for m in _messages(text, schedule_rules=True) if "never updated" in m]


def test_a_shape_error_after_passing_tasks_of_the_same_shape_is_reported():
    text = generate(16)
    module = parse_text(text, "gen.vir")
    assert not verify_module(module).has_errors
    dpu, sw = module.task_lists[1].tasks[-1], module.task_lists[2].tasks[-1]
    lines = text.splitlines()
    # the last DPU task's variants no longer tile its output
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{dpu.label}:"))
    lines[at + 1] = lines[at + 1].replace("end(15, 3, 15)", "end(15, 2, 15)")
    # the last sw task writes a buffer of another shape than it reads (hswish broadcasts)
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{sw.label}:"))
    lines[at] = lines[at].replace(f"outputs(%{sw.outputs[0].buffer} ", f"outputs(%w{sw.tile} ")
    module = parse_text("\n".join(lines), "gen.vir")
    errors = [d.message for d in verify_module(module, schedule_rules=False).items
              if d.severity.name == "ERROR"]
    assert "the variants cover" in errors[0] and len(errors) > 1, errors
    assert all("broadcasts to output %o of @hswish (16x16x3x3xf16)" in e for e in errors[1:])
