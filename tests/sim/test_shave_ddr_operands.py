"""Library kernels reading an input left in DDR (vpuc/abi/ddr_aperture.py): the gather of
examples/gather_ddr.vir reads the rows its indices pick from a table in DDR, exactly
(copies); its MemRefData points into the SHAVE's DDR aperture; the blob keeps it; a DMA
writing the table unordered with the kernel is a race; the simulator charges the reads by
vpuc/cost/shave_ddr.py; what the verifier refuses is located."""

from pathlib import Path

import numpy as np
import pytest

from vpuc import api
from vpuc.abi.params import decode_params
from vpuc.abi.contract import contract_slots
from vpuc.cost.shave_ddr import DdrRead, ddr_read_cycles
from vpuc.diagnostics import VpucError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "examples" / "gather_ddr.vir").read_text()
IDS = np.array([0, 5, 999, -1, 3, 3, 7, 500], np.int32)


def _table() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((1000, 64)).astype(np.float16)


def _run(program, **kw):
    return api.simulate(program, {"table": _table(), "ids": IDS}, **kw)


def test_the_rows_come_from_the_table_in_ddr_exactly():
    sim = _run(api.compile_text(EXAMPLE, "gather_ddr.vir"))
    got = sim.result.outputs["rows"]
    assert got.dtype == np.float16
    assert np.array_equal(got, _table()[IDS])           # a copy: bit for bit


def test_the_table_is_addressed_in_the_ddr_aperture():
    program = api.compile_text(EXAMPLE, "gather_ddr.vir")
    [inv] = program.invocations
    kernel = next(k for k in program.module.kernels if k.name == inv.kernel)
    struct = inv.window_e[inv.args_offset:inv.args_offset + inv.args_size]
    data, indices, output = (m for _, m in decode_params(contract_slots(kernel), struct)[:3])
    assert data.dataAddr == program.arch.ddr_aperture               # the only DDR operand
    win_f = program.arch.window_base("WIN_F")
    assert win_f <= indices.dataAddr < win_f + program.arch.window_size
    assert win_f <= output.dataAddr < win_f + program.arch.window_size


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_a_blob_keeps_it(fmt):
    program = api.compile_text(EXAMPLE, "gather_ddr.vir", format=fmt)
    direct = _run(program)
    again = _run(api.read_blob(api.write_blob(program)))
    assert np.array_equal(again.result.outputs["rows"], direct.result.outputs["rows"])
    assert again.cycles == direct.cycles


def test_the_reads_are_charged_by_the_cost_model():
    """The gather's SHAVE unit takes its instructions plus the cost term of 8 runs of one
    128-byte row: the same program with the term's timing set to nothing is shorter by it."""
    from runtime_sim import simulator
    from runtime_sim.simarch import load_sim_arch
    program = api.compile_text(EXAMPLE, "gather_ddr.vir")
    arch = load_sim_arch("NPU37XX")
    term = ddr_read_cycles(DdrRead(8, 128), arch.dma.ddr_read_latency, arch.ddr_bytes_per_cycle)
    with_term = api.simulate(program, {"ids": IDS}, timing_only=True).cycles

    real = simulator.ShaveEngine.ddr_cycles
    try:
        simulator.ShaveEngine.ddr_cycles = lambda self, invocation: 0
        without = api.simulate(program, {"ids": IDS}, timing_only=True).cycles
    finally:
        simulator.ShaveEngine.ddr_cycles = real
    # the term in whole SHAVE cycles, back in NCE cycles: within one SHAVE cycle of it
    assert abs((with_term - without) - term) <= arch.shave_cycle + 1e-6, (with_term, without, term)


RACE = EXAMPLE.replace("input %table : 1000x64xf16", "input %src : 1000x64xf16\n"
                       "ddr %table : 1000x64xf16").replace(
    "  store: dma", "  fill: dma %src -> %table channel 1\n  store: dma")


def test_a_dma_writing_the_table_unordered_with_the_kernel_is_a_race():
    with pytest.raises(VpucError) as caught:
        api.compile_text(RACE, "race.vir")
    message = str(caught.value)
    assert "race on ddr %table" in message and "fill" in message and "gather" in message


def test_ordered_by_a_barrier_it_is_no_race_and_exact():
    text = RACE.replace("fill: dma %src -> %table channel 1",
                        "fill: dma %src -> %table channel 1 updates(%loaded)")
    sim = api.simulate(api.compile_text(text, "ordered.vir"), {"src": _table(), "ids": IDS})
    assert np.array_equal(sim.result.outputs["rows"], _table()[IDS])


def test_a_kernel_output_in_ddr_is_refused_where_bound():
    text = EXAMPLE.replace("outputs(%rows_cmx as %out)", "outputs(%rows as %out)")
    with pytest.raises(VpucError) as caught:
        api.compile_text(text, "out_in_ddr.vir")
    diag = caught.value.diagnostics[0]
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "outputs(%rows as" in t)
    assert "kernel output %rows is in DDR" in diag.message and diag.loc.line == line


def test_a_generated_or_elf_kernel_may_not_read_ddr():
    text = EXAMPLE.replace('from library "gather"', 'from asm "kernels/gather.s"')
    with pytest.raises(VpucError) as caught:
        api.compile_text(text, "asm_ddr.vir")
    assert "only library kernels read DDR operands" in str(caught.value)


def test_ddr_operands_past_the_32_bit_space_are_refused_at_the_buffer():
    """Two 1.5 GiB tables from the aperture at 0x80000000: the second ends past 2^32."""
    text = EXAMPLE.replace("input %table : 1000x64xf16",
                           "input %table : 12582912x64xf16\ninput %table2 : 12582912x64xf16")
    text = text.replace("barrier %gathered", "barrier %gathered\nbarrier %first_half")
    first = "waits(%loaded) updates(%gathered) {"
    text = text.replace(first, "waits(%loaded) updates(%first_half) {")
    text = text.replace("    run(%data, %idx, %out, %first, %extent)\n  }\n",
                        "    run(%data, %idx, %out, %first, %extent)\n  }\n"
                        "  gather2: sw @gather_f16 on tile 0 inputs(%table2 as %data, %ids_cmx as "
                        "%idx) outputs(%rows_cmx as %out) waits(%first_half) updates(%gathered) {\n"
                        "    %first = const 0 : i32\n    %extent = const 1000 : i32\n"
                        "    run(%data, %idx, %out, %first, %extent)\n  }\n")
    with pytest.raises(VpucError) as caught:
        api.compile_text(text, "big.vir")
    diag = caught.value.diagnostics[0]
    assert "%table2, read from DDR by an ACT SHAVE kernel" in diag.message, diag.message
    assert "past the 32-bit address space" in diag.message
    assert diag.loc.line == next(i for i, t in enumerate(text.splitlines(), 1)
                                 if t.startswith("input %table2"))
