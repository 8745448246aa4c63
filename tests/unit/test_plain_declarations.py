"""Machine-written VIR read with plain declarations (vpuc/vir/plain_declarations.py) parses
to the module lark alone gives, locations included; hand-written text never takes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.fusion.lower_graph_segments import lower
from vpuc.passes.base import PassContext
from vpuc.vir.parser import parse_file, parse_text
from vpuc.vir.plain_declarations import take_declarations
from vpuc.vir.parser import _parser

ROOT = Path(__file__).resolve().parents[2]


def lowered_text(example: str) -> str:
    module = parse_file(ROOT / "examples" / example)
    ctx = PassContext(load_arch(module.arch))
    return lower(module.graphs[0], module, {}, [], None, ctx.arch.tiles, timing=ctx.timing,
                 schedule="default", gates=set(), cmx_budget=ctx.cmx_budget)


def locations(module) -> list:
    out = []
    for item in [*module.buffers, *module.views, *module.barriers]:
        out.append((item.name, item.loc.line, item.loc.col))
        base = getattr(item, "base", None)
        if base is not None:
            out.append((str(base), base.loc.line, base.loc.col))
    return out


@pytest.mark.parametrize("example", ["graph_conv.vir", "fused_chain.vir", "graph_blocks.vir"])
def test_lowered_programs_parse_the_same(example):
    text = lowered_text(example)
    whole = parse_text(text, "<lowered>")
    fast = parse_text(text, "<lowered>", machine_written=True)
    assert fast == whole
    assert locations(fast) == locations(whole)
    parser, transformer = _parser()
    transformer.reset("<lowered>")
    _, buffers, views, barriers = take_declarations(text, transformer)
    assert views and barriers and buffers        # the plain reader did read some


PLAIN = """module @m arch NPU37XX
input %in : 1x16x8x8xf16 NCHW
cmx %a : 1x16x8x8xf16 NHWC tile 1
const %k : 2xf16 = [1, 2]
view %v = %in[0, 0:16:2, 3, 0:8]
barrier %b
barrier %p = physical 3
ddr %d : 4x?<=8xf16
"""


def test_each_shape_and_the_lines_left_to_lark():
    whole = parse_text(PLAIN, "<plain>")
    fast = parse_text(PLAIN, "<plain>", machine_written=True)
    assert fast == whole and locations(fast) == locations(whole)
    parser, transformer = _parser()
    transformer.reset("<plain>")
    rest, buffers, views, barriers = take_declarations(PLAIN, transformer)
    assert [b.name for b in buffers] == ["in", "a"]                  # const, dynamic: lark's
    assert [v.name for v in views] == ["v"] and [b.name for b in barriers] == ["b"]
    assert rest.count("\n") == PLAIN.count("\n")                     # line numbers kept


def test_checks_are_the_parsers_own():
    text = "module @m arch NPU37XX\ncmx %a : 1x16xf16 NCHW tile 0\n"
    for machine_written in (False, True):
        with pytest.raises(VpucError) as err:
            parse_text(text, "<bad>", machine_written=machine_written)
        assert "dims order NCHW has rank 4 but the type 1x16xf16 has rank 2" in str(err.value)
        assert err.value.diagnostics[0].loc.line == 2


def test_hand_written_text_is_all_lark():
    """A declaration inside a task list is a syntax error in a file a user wrote."""
    text = "module @m arch NPU37XX\ntasks DMA {\nbarrier %b\n}\n"
    with pytest.raises(VpucError):
        parse_text(text, "<hand>")
