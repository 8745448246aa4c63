"""A layer that streams its weight chunks (``lower_dpu_nn.emit_jobs``, ``stream``) keeps
each block's output in a CMX buffer of its own (``LayerEmitter.own_outputs``): its outputs
are far smaller than its chunks, so no block waits for the store of the block whose slot
it takes.  Such a store runs on the store channel, whose FIFO holds it behind the next
layers' prefetched weights: ResNet-18's last 3x3 layer's last chunk waited 20K cycles for
one (schedule_bench cycles 1,674,273 -> 1,671,781).  A layer whose DPU is its longer
stage keeps its slots' ``stored`` barriers: its outputs are not small beside its weights.
"""

from __future__ import annotations

from tests.onnx_import.test_lower_dpu_nn import compile_and_compare
from tests.onnx_import.test_weight_streaming import BUDGET, _build, _program
from vpuc.ir.tasks import DpuTask

LAYER = "conv_9.convolution."      # the streaming 128 -> 256 3x3 layer


def _waits(task) -> set[str]:
    return set(task.waits) | {w for v in task.variants for w in v.waits}


def test_streaming_blocks_wait_for_no_store(tmp_path):
    program = _program(tmp_path)
    blocks = [t for tl in program.module.task_lists for t in tl.tasks
              if isinstance(t, DpuTask) and (t.label or "").startswith(LAYER)]
    # more blocks than slots: before, the blocks past the first slots waited for a store
    assert len(blocks) > 4
    assert not [w for t in blocks for w in _waits(t) if ".stored" in w]
    assert not [b.name for b in program.module.barriers if b.name.startswith(LAYER + "stored")]
    outputs = [t.output for t in blocks]
    assert len(set(outputs)) == len(outputs)


def test_blocks_with_their_own_outputs_match_onnxruntime(tmp_path):
    tasks = compile_and_compare(tmp_path, _build, cmx_budget=BUDGET)
    assert {t.tile for t in tasks} == {0, 1}
