"""The per-word records a cold run works out once per decoded word (about 900 for the
encoder's kernels), each against the per-operand reading it replaced: the slice's
shape (``cycles_slice._shape``, planned per opcode) and the interpreter's timing and
immediates (``program._word``)."""

from __future__ import annotations

import random

import pytest

from runtime_sim.isa import cycles_slice, program as isa_program
from runtime_sim.isa.cycles import CYCLES
from runtime_sim.isa.semantics import SEMANTICS, operand_access
from tests.sim.test_sim_cycles_only import _library_and_zoo_programs
from tests.sim.test_sim_cycles_only import program  # noqa: F401 -- the fixture
from vpuc.shave.encoding import FIELDS, DecodeError, Decoded, field_values
from vpuc.shave.isa import INSTRUCTIONS, NUM_SREGS, REG_LR


def _reference_shape(dec, access) -> tuple:
    """``cycles_slice._shape`` as first written: operand by operand of the word."""
    sem = SEMANTICS[dec.info.opcode]
    reads = [key for where, key in access.reads if where == "reg"]
    address = 0
    for op in dec.info.operands:
        if op.kind == "mem":
            address |= 1 << dec.fields[op.field]
        elif address and op.kind == "sa" and sem.kind in ("load", "store") \
                and dec.info.format.startswith("V"):
            address |= 1 << dec.fields[op.field]
    uses = sum(1 << key for key in set(reads) if key < NUM_SREGS)
    defs = sum(1 << key for key in set(access.writes) if key < NUM_SREGS)
    if dec.info.format == "MS":
        address |= uses
    if sem.mnemonic == "ret":
        uses |= 1 << REG_LR
    if sem.mnemonic == "call":
        defs |= 1 << REG_LR
    return (sem.kind, uses, defs, address, any(key >= NUM_SREGS for key in reads),
            any(key >= NUM_SREGS for key in access.writes),
            dec.info.format.startswith("S") and sem.kind in ("load", "store"))


def _reference_word(dec) -> tuple:
    """``program._word``'s (sources, dests, cost, immediates) as first written."""
    access = operand_access(dec)
    sources = tuple(key for where, key in access.reads if where == "reg")
    mnemonic = SEMANTICS[dec.info.opcode].mnemonic
    if mnemonic == "ret":
        sources = (REG_LR,)
    dests = tuple(access.writes) + ((REG_LR,) if mnemonic == "call" else ())
    return (sources, dests, CYCLES[dec.info.opcode],
            tuple(value for where, value in access.reads if where != "reg"))


def _words(zoo_program) -> list[Decoded]:
    rng = random.Random(0)
    found = [Decoded(info, field_values(rng.getrandbits(64)))
             for info in INSTRUCTIONS for _ in range(8)]
    for kernel in _library_and_zoo_programs(zoo_program):
        found += kernel.decoded
    return found


def test_the_slices_shape_of_a_word_is_its_operands(program):
    words = _words(program)
    assert len(words) > 1000
    kinds = set()
    for dec in words:
        found = cycles_slice._shape(dec, operand_access(dec))
        assert found == _reference_shape(dec, operand_access(dec)), dec
        kinds.add((found[0], bool(found[3]), found[4], found[6]))
    assert len(kinds) > 8           # loads, stores, masks, control: every branch of _shape


def test_a_programs_timing_and_immediates_of_a_word_are_its_operands(program):
    for dec in _words(program):
        _, timing, immediates, tail = isa_program._word(dec)
        found = (timing.sources, timing.dests, timing.cost, immediates)
        expected = _reference_word(dec)
        assert found == expected, dec
        assert [type(v) for v in found[3]] == [type(v) for v in expected[3]]
        assert tail == isa_program.flat_step(None, *expected[:3])[1:]      # the flat step's


def test_a_programs_flat_steps_are_its_steps_unpacked(program):
    """``Program.flat`` and ``flat_entry`` (the word's remembered issue inputs) are
    ``flat_step`` of each step, on every library and zoo kernel."""
    for kernel in _library_and_zoo_programs(program):
        expected = [isa_program.flat_step(*step) for step in kernel.steps]
        assert kernel.flat == expected
        assert [kernel.flat_entry(step.runner, i) for i, step in enumerate(kernel.steps)] \
            == expected


def test_critical_out_by_blocks_is_the_per_instruction_union(program):
    """``critical_out_blocks`` (inside a block the next instruction's ``crit_in``) gives
    ``critical_out``'s union over successors, exits' status included, on every library
    and zoo kernel whose slice exists."""
    from runtime_sim.isa.cycles_slice_flow import _Blocks, critical_out_blocks
    checked = 0
    for kernel in _library_and_zoo_programs(program):
        found = cycles_slice.analyse(kernel.decoded)
        if found.roles is None:
            continue
        decoded = kernel.decoded
        ins = [cycles_slice._instruction(i, dec, operand_access(dec), len(decoded))
               for i, dec in enumerate(decoded)]
        succ = cycles_slice._successors(ins)
        steps = [cycles_slice._word(dec)[5] for dec in decoded]
        crit_in = list(found.critical_at)
        expected, bad = cycles_slice.critical_out(ins, succ, crit_in)
        assert bad is None
        assert critical_out_blocks(steps, succ, crit_in, _Blocks(succ)) == expected
        checked += 1
    assert checked > 20


def test_records_made_without_their_init_are_the_constructors(program):
    """``Decoded``, ``Access`` and the walk's ``_Op`` are frozen dataclasses a cold run
    makes once per word without their ``__init__``: each equals (field by field, and by
    ``==``) the one its constructor makes, and stays frozen."""
    import dataclasses

    from runtime_sim.isa.path_ops import _make_op, _Op
    from runtime_sim.isa.register_access import Access, _operand_access
    from vpuc.shave.encoding import _decode
    for dec in _words(program)[::3]:
        word = sum(value << FIELDS[name][0] for name, value in dec.fields.items())
        try:
            made = _decode(word)
        except DecodeError:
            made = None                     # a random word may not decode
        if made is not None:
            assert made == Decoded(made.info, dict(made.fields)) and made.fields == dec.fields
        for found, cls in ((_operand_access(dec), Access), (_make_op(dec), _Op)):
            values = [getattr(found, f.name) for f in dataclasses.fields(cls)]
            built = cls(*values)
            assert found == built and vars(found) == vars(built)
            with pytest.raises(dataclasses.FrozenInstanceError):
                found.reads = ()


def test_a_body_op_is_the_constructors_at_every_position(program):
    """``loop_plan._body_op`` keeps a word's fields once and makes the op without its
    ``__init__``: the op the constructor makes, at any position, on every word."""
    import dataclasses

    from runtime_sim.isa.loop_plan import SEMANTICS as _SEM
    from runtime_sim.isa.loop_plan import BodyOp, _body_op, _memory_shape
    for position, dec in enumerate(_words(program)[::2]):
        sem = _SEM[dec.info.opcode]
        access = operand_access(dec)
        memory = (_memory_shape(dec, sem.mnemonic, sem.kind)
                  if sem.kind in ("load", "store") else None)
        built = BodyOp(position % 97, sem.mnemonic, sem.kind, sem.fn, access.reads,
                       access.writes, memory)
        for _ in range(2):                  # made, then from the word's fields kept
            found = _body_op(position % 97, dec)
            assert found == built and list(vars(found).items()) == list(vars(built).items())
        with pytest.raises(dataclasses.FrozenInstanceError):
            found.position = 0
