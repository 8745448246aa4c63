"""Reading verifies on columns and class representatives (vpuc/blob/verify_columns.py):
it accepts what the module verifier accepts, and a blob the module verifier rejects is
refused with the module verifier's message, whichever task of a long list is bad."""

import sys

import pytest
from blob_testlib import REPO, SOURCES, IDS, compiled, with_task

import vpuc.blob.rebuild as rebuild_module
from vpuc.blob.content import DMA_MODE_CODE
from vpuc.blob.flatten import flatten
from vpuc.blob.rebuild import rebuild
from vpuc.blob.verify_columns import verify_by_columns
from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import DmaMode
from vpuc.verifier import verify_module

sys.path.insert(0, str(REPO / "bench"))
from gen_program import generate  # noqa: E402

BLOCKS = 12      # 48 tasks: every class of task repeats, the bad one is the last of its list
LAST_OUT = f"out{BLOCKS - 1}"


@pytest.fixture(scope="module")
def bench_content(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "bench.vir"
    path.write_text(generate(4 * BLOCKS))
    return flatten(compiled(path))


def verdicts(content) -> tuple[bool, bool]:
    """(the column verdict, the module verifier's) on the program the records rebuild to."""
    program = rebuild(content, "x.blob", verify=False)
    columns = verify_by_columns(program.module, program.arch, content)
    full = verify_module(program.module, program.arch, schedule_rules=False)
    return columns, not full.has_errors


def read_message(content, monkeypatch, *, columns: bool) -> str | None:
    if not columns:       # the eager path: the module verifier over every task
        monkeypatch.setattr(rebuild_module, "verify_by_columns", lambda *args, **kw: False)
    try:
        rebuild(content, "x.blob")
    except VpucError as exc:
        return exc.diagnostics[0].message
    finally:
        monkeypatch.undo()
    return None


def tensor(content, name: str) -> int:
    return next(i for i, t in enumerate(content.tensors) if t.name == name)


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_the_columns_accept_what_the_verifier_accepts(path):
    content = flatten(compiled(path))
    assert verdicts(content) == (True, True)


def test_the_bench_program_verifies_on_representatives(bench_content):
    assert verdicts(bench_content) == (True, True)


def _last(content, executor: int) -> int:
    return len(next(tl for tl in content.task_lists if tl.executor == executor).tasks) - 1


# Each edit breaks one rule on the last task of its list (or on one barrier).
EDITS = {
    "dma channel": lambda c: with_task(c, 0, _last(c, 0), channel=7),
    "dma into the network input": lambda c: with_task(
        c, 0, _last(c, 0), dst=tensor(c, "in0")),
    "dma onto itself": lambda c: with_task(
        c, 0, _last(c, 0), src=c.task_lists[0].tasks[-1].dst),
    "dma changes the size": lambda c: with_task(c, 0, _last(c, 0), dst=tensor(c, "w1")),
    "dma permute of other shapes": lambda c: with_task(
        c, 0, _last(c, 0), dst=tensor(c, "w1"), mode=DMA_MODE_CODE[DmaMode.PERMUTE]),
    "duplicate label": lambda c: with_task(c, 0, _last(c, 0), label="load0"),
    "waits on what it updates": lambda c: with_task(
        c, 0, _last(c, 0), waits=_both(c.task_lists[0].tasks[-1])),
    "dpu on another tile": lambda c: with_task(c, 1, _last(c, 1), tile=0),
    "dpu output of another shape": lambda c: with_task(c, 1, _last(c, 1),
                                                       output=tensor(c, "w1")),
    "sw task on another tile": lambda c: with_task(c, 2, _last(c, 2), tile=0),
    "barrier waited on, never updated": lambda c: _unproduced(c),
    "view slice out of range": lambda c: _with_view(c, f"in{BLOCKS - 1}", slices=(
        c.tensors[tensor(c, f"in{BLOCKS - 1}")].slices[0]._replace(start=BLOCKS),
        *c.tensors[tensor(c, f"in{BLOCKS - 1}")].slices[1:])),
    "view offset recorded wrong": lambda c: _with_view(
        c, LAST_OUT, data_offset=c.tensors[tensor(c, LAST_OUT)].data_offset + 2),
    "view strides recorded wrong": lambda c: _with_view(
        c, LAST_OUT, strides=(1,) + c.tensors[tensor(c, LAST_OUT)].strides[1:]),
    "view on another memory": lambda c: _with_view(c, LAST_OUT, tile=1),
    "a tensor named like a barrier": lambda c: _with_view(c, LAST_OUT, name="l0"),
    "two tensors of one name": lambda c: _with_view(c, LAST_OUT, name="in0"),
    "two barriers of one name": lambda c: c._replace(barriers=c.barriers[:-1] + (
        c.barriers[-1]._replace(name=c.barriers[0].name),)),
    "physical barrier id out of range": lambda c: c._replace(barriers=(
        c.barriers[0]._replace(physical_id=10 ** 4),) + c.barriers[1:]),
}


def _with_view(content, view: str, **fields):
    tensors = list(content.tensors)
    at = tensor(content, view)
    tensors[at] = tensors[at]._replace(**fields)
    return content._replace(tensors=tuple(tensors))


def _both(task) -> tuple[int, ...]:
    return task.waits + task.updates


def _unproduced(content):
    """The last store updates nothing, and the first load waits on what it updated."""
    barrier = content.task_lists[0].tasks[-1].updates[0]
    content = with_task(content, 0, _last(content, 0), updates=())
    return with_task(content, 0, 0, waits=(barrier,))


def recounted(content):
    """The barriers' producer and consumer counts recorded as the edited tasks make them
    (a DPU task counts once per variant)."""
    producers = [0] * len(content.barriers)
    consumers = [0] * len(content.barriers)
    for tl in content.task_lists:
        for t in tl.tasks:
            units = [(t.waits + v.waits, t.updates + v.updates) for v in t.variants] \
                if hasattr(t, "variants") else [(t.waits, t.updates)]
            for waits, updates in units:
                for b in set(waits):
                    consumers[b] += 1
                for b in set(updates):
                    producers[b] += 1
    return content._replace(barriers=tuple(
        b._replace(producer_count=p, consumer_count=c)
        for b, p, c in zip(content.barriers, producers, consumers)))


@pytest.mark.parametrize("edit", EDITS)
def test_a_bad_task_is_refused_with_the_verifier_message(bench_content, edit, monkeypatch):
    content = recounted(EDITS[edit](bench_content))
    program = rebuild(content, "x.blob", verify=False)
    assert not verify_by_columns(program.module, program.arch, content)
    eager = read_message(content, monkeypatch, columns=False)
    assert eager is not None
    assert read_message(content, monkeypatch, columns=True) == eager


VIEW_CHAINS = """module @vv arch NPU37XX

input %in : 1x16x8x16xf16 NHWC
output %out : 1x16x4x8xf16 NHWC
output %out2 : 1x16x2x8xf16 NHWC
view %corner = %quarter[:, :, 2:4, :]
view %quarter = %half[:, :, :, 0:16:2]
view %half = %in[0:1, :, 0:8:2, :]
view %low = %out[:, :, 0:2, :]
barrier %b
barrier %c

tasks DMA {
  a: dma %quarter -> %out channel 0 updates(%b)
  b: dma %low -> %out2 channel 1 waits(%b) updates(%c)
  c: dma %corner -> %out2 channel 0 waits(%c)
}
"""


def test_views_of_views_resolve_as_the_symbol_table_does():
    """Strided views of strided views, declared before their bases: each level resolved
    with numpy gives the symbol table's root and offset, and equal type ids only to equal
    types."""
    from vpuc.api import compile_text
    from vpuc.blob.view_columns import tensor_columns
    from vpuc.ir.symbols import SymbolTable

    program = compile_text(VIEW_CHAINS, "vv.vir")
    content = flatten(program)
    columns = tensor_columns(program.module, content.tensors)
    assert columns is not None
    symbols = SymbolTable(program.module)
    regions = [symbols.region(t.name) for t in content.tensors]
    names = [t.name for t in content.tensors]
    assert [names[r] for r in columns.root.tolist()] == [r.root.name for r in regions]
    assert columns.offset.tolist() == [r.byte_offset for r in regions]
    for i, a in enumerate(regions):
        for j, b in enumerate(regions):
            if columns.type_id[i] == columns.type_id[j]:
                assert a.type == b.type
    assert verify_by_columns(program.module, program.arch, content)


@pytest.mark.parametrize("high", [7, 1 << 40])
def test_row_codes_equal_iff_rows_equal(high):
    """Classes of rows (DMA keys, view types) by one int per row: two rows get one code iff
    they are equal, whether the columns' ranges fit one int64 (mixed radix) or not (rows)."""
    import numpy as np
    from vpuc.task_tables import row_codes

    rng = np.random.default_rng(0)
    rows = rng.integers(-3, high, size=(400, 4), dtype=np.int64)
    rows[200:] = rows[:200]                     # every row twice
    rows[:, 3] = rng.integers(-(1 << 40), 1 << 40, size=400) if high > 7 else rows[:, 3]
    codes = row_codes(rows)
    as_tuples = list(map(tuple, rows.tolist()))
    as_codes = list(map(tuple, codes.reshape(len(rows), -1).tolist()))
    for i in range(0, 400, 7):
        for j in range(0, 400, 3):
            assert (as_tuples[i] == as_tuples[j]) == (as_codes[i] == as_codes[j])
    assert codes.ndim == (1 if high == 7 else 2)
