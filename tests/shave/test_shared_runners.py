"""Runners read their immediates from R, so programs of one template share them and
still compute with their own immediates (``Program.make_runner``)."""

from runtime_sim.isa import run
from runtime_sim.isa.program import Program
from shave_testlib import WIN_D, make_memory
from vpuc.shave import assemble

_TEMPLATE = """
    .global k
    .text
k:
    li    s2, {start}
    li    s3, 3
again:
    addi  s2, s2, {step}
    call  twice
    loop  s3, again
    mov   s0, s2
    li    s4, 0
    halt
twice:
    add   s2, s2, s2
    ret
"""


def _program(start: int, step: int) -> Program:
    obj = assemble(_TEMPLATE.format(start=start, step=step), "t.s")
    return Program(obj.text, WIN_D, "t")


def _result(start: int, step: int) -> int:
    for _ in range(3):
        start = (start + step) * 2
    return start


def test_programs_of_one_template_share_runners_and_keep_their_immediates():
    a, b = _program(5, 1), _program(7, 10)
    assert a.decoded != b.decoded
    rets = [i for i, dec in enumerate(a.decoded) if dec.info.mnemonic == "ret"]
    shared = [i for i in range(len(a.decoded)) if i not in rets]
    assert all(a.make_runner(i) is b.make_runner(i) for i in shared)
    assert all(a.make_runner(i) is not b.make_runner(i) for i in rets)   # its own .text
    for program, (start, step) in ((a, (5, 1)), (b, (7, 10))):
        result = run(program, make_memory()[0], entry=0)
        assert result.scalar_regs[0] == _result(start, step)
        assert result.scalar_regs[3] == 0                  # the loop counter ran out


def test_a_program_at_another_base_links_calls_to_its_own_return_address():
    obj = assemble(_TEMPLATE.format(start=1, step=1), "t.s")
    here, there = Program(obj.text, WIN_D, "t"), Program(obj.text, WIN_D + 0x100, "t")
    call = next(i for i, dec in enumerate(here.decoded) if dec.info.mnemonic == "call")
    assert here.make_runner(call) is not there.make_runner(call)
    assert run(there, make_memory()[0], entry=0).scalar_regs[0] == _result(1, 1)
