"""``schedule_deps.relax_gates``: a segment waits on the gate two back, unless allocate-cmx,
tried on the result, finds no room for one of its buffers; then it keeps its own gate."""

from __future__ import annotations

import pytest

from vpuc import api
from vpuc.fusion import lower_graph, schedule_deps
from vpuc.ir.module import BufferKind
from vpuc.onnx_import.zoo import resnet18


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return resnet18(size=32, width=8, classes=10).save(
        tmp_path_factory.mktemp("deps") / "r.onnx", "resnet18")


def _compile(model, monkeypatch, fail_segment: int | None):
    seen = {}
    relax, trial = schedule_deps.relax_gates, schedule_deps._failed_allocation

    def recording(module, keys, finishes, arch, then=None):
        # without block_deps' further relaxation (it may wait on a gate again where a
        # load needs the store that updates it), so the gates seen are relax_gates' own
        seen.update(keys=keys, finishes=finishes, module=module)
        return relax(module, keys, finishes, arch)

    def failing(module, arch):
        seen["trials"] = seen.get("trials", 0) + 1
        if fail_segment is not None and seen["trials"] == 1:
            prefix = seen["keys"][fail_segment] + "."
            return next(b.name for b in module.buffers
                        if b.kind is BufferKind.CMX and b.name.startswith(prefix))
        return trial(module, arch)

    monkeypatch.setattr(lower_graph, "relax_gates", recording)
    monkeypatch.setattr(schedule_deps, "_failed_allocation", failing)
    api.compile(model, schedule="default")
    return seen


def _waits_of(seen, segment: int) -> set[str]:
    key = seen["keys"][segment] + "."
    return {w for tl in seen["module"].task_lists for t in tl.tasks
            if (t.label or "").startswith(key) for w in t.waits}


def test_segments_wait_two_back_when_cmx_allows(model, monkeypatch):
    seen = _compile(model, monkeypatch, None)
    assert seen["trials"] == 1
    assert seen["finishes"][1] not in _waits_of(seen, 2)      # not its predecessor's gate
    assert seen["finishes"][0] in _waits_of(seen, 2)          # the one two back


def test_a_segment_whose_buffer_finds_no_room_keeps_its_gate(model, monkeypatch):
    seen = _compile(model, monkeypatch, 2)
    assert seen["trials"] == 2
    assert seen["finishes"][1] in _waits_of(seen, 2)
    assert seen["finishes"][2] not in _waits_of(seen, 3)      # the others stay relaxed
