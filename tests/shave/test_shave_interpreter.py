"""The exact interpreter: kernels end to end, the ABI, faults and cycle counting."""

import struct

import numpy as np
import pytest

from runtime_sim.isa import Program, load_kernel, run, run_kernel
from shave_testlib import WIN_D, WIN_E, WIN_F, make_memory
from test_shave_assembler import CLAMP
from vpuc.abi import MemRefData, compact_strides_bits, memory_dims, pack_dims, pack_strides
from vpuc.diagnostics import VpucError
from vpuc.shave import assemble


def run_source(source, memory=None, **kwargs):
    memory = memory or make_memory()[0]
    return run_kernel(assemble(source, "t.s"), memory, **kwargs)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 100, 1003])
def test_clamp_kernel(n):
    memory, arrays = make_memory()
    x = (np.random.default_rng(n).standard_normal(n) * 8).astype(np.float16)
    arrays["WIN_F"][:2 * n] = x.view(np.uint8)
    arrays["WIN_F"][0x8000:] = 0xAA
    args = struct.pack("<IIIee", WIN_F, WIN_F + 0x8000, n, -1.0, 6.0)
    arrays["WIN_E"][:len(args)] = np.frombuffer(args, np.uint8)
    result = run_kernel(assemble(CLAMP, "clamp.s"), memory, args_addr=WIN_E, args_size=len(args))
    out = arrays["WIN_F"][0x8000:0x8000 + 2 * n].view(np.float16)
    assert np.array_equal(out, np.clip(x, np.float16(-1), np.float16(6)))
    assert (arrays["WIN_F"][0x8000 + 2 * n:] == 0xAA).all()          # tail not overrun
    assert result.opcode_counts.get("vld", 0) == n // 8
    assert result.opcode_counts.get("vst.m", 0) == (1 if n % 8 else 0)
    assert result.opcode_counts["ret"] == 1
    assert result.instructions == sum(result.opcode_counts.values())


def test_cycle_count_of_doc_example():
    result = run_source("    .global k\nk:\n    li s1, 5\n    addi s2, s1, 1\n    muli s3, s2, 3\n"
                        "    halt\n")
    assert (result.cycles, result.instructions, result.stall_cycles) == (5, 4, 0)
    assert result.scalar_regs[3] == 18


def test_cycle_count_loop_is_zero_overhead():
    # li@0; each (addi, loop) pair is one bundle, at 1, 2, 3; halt@4 -> 5 cycles
    result = run_source("    .global k\nk:\n    li s1, 3\nl:\n    addi s2, s2, 1\n"
                        "    loop s1, l\n    halt\n")
    assert (result.cycles, result.instructions, result.stall_cycles) == (5, 8, 0)
    assert result.opcode_counts == {"li": 1, "addi": 3, "loop": 3, "halt": 1}


def test_cycle_count_stalls_penalties_and_drain():
    # lw@0 (s3 ready 3); addi stalls to 3; beq@4 taken (+2); vexp@7 (ready 17); halt@9
    source = """
    .global k
k:
    lw s3, 0(s0)
    addi s4, s3, 1
    beq s4, s4, skip
    nop
skip:
    vexp.f16 v1, v2
    halt
"""
    memory, _ = make_memory()
    result = run_source(source, memory, args_addr=WIN_E)
    assert (result.cycles, result.instructions, result.stall_cycles) == (17, 5, 2)


def test_call_ret_stack_and_exit_by_ret():
    source = """
    .global k
k:
    addi sp, sp, -16
    sw lr, 0(sp)
    li s0, 20
    call double
    call double
    lw lr, 0(sp)
    addi sp, sp, 16
    ret
double:
    add s0, s0, s0
    ret
"""
    memory, arrays = make_memory()
    result = run_source(source, memory)
    assert result.scalar_regs[0] == 80
    assert result.scalar_regs[30] == WIN_E + len(arrays["WIN_E"])       # sp restored
    assert result.exit_pc == WIN_D + 7 * 8


def test_entry_registers_follow_the_abi():
    result = run_source("    .global k\nk:\n    halt\n", args_addr=WIN_E + 64, args_size=68,
                        stack_top=WIN_E + 0x800)
    regs = result.scalar_regs
    assert (regs[0], regs[1], regs[30], regs[31]) == (WIN_E + 64, 68, WIN_E + 0x800, 0)
    assert not any(regs[2:30])


def test_kernel_reads_memref_dims_in_memory_order():
    # elements = product of dims[0..numDims); innermost extent = dims[0]; dimsOrder via ld
    source = """
    .global k
k:
    lw s2, 8(s0)           # numDims
    lw s3, 12(s0)          # dimsAddr
    lw s9, 0(s3)           # dims[0]: innermost extent
    ld s10, 24(s0)         # dimsOrder (low, high)
    li s4, 1
count:
    lw s5, 0(s3)
    mul s4, s4, s5
    addi s3, s3, 4
    loop s2, count
    lw s6, 16(s0)          # stridesAddr
    ld s12, 8(s6)          # strides[1] in bits
    halt
"""
    memory, arrays = make_memory()
    shape, order = [1, 16, 32, 32], 0x1342
    dims, strides = memory_dims(shape, order), compact_strides_bits(shape, order, 16)
    params = MemRefData(WIN_F, 1, 4, WIN_E + 0x40, WIN_E + 0x50, 2, order).pack()
    blob = params + bytes(0x40 - len(params)) + pack_dims(dims) + pack_strides(strides)
    arrays["WIN_E"][:len(blob)] = np.frombuffer(blob, np.uint8)
    regs = run_source(source, memory, args_addr=WIN_E, args_size=32).scalar_regs
    assert (regs[4], regs[9], regs[10], regs[11], regs[12], regs[13]) == (16384, 16, 0x1342, 0,
                                                                          256, 0)


def _error(source, **kwargs):
    with pytest.raises(VpucError) as info:
        run_source(source, **kwargs)
    return info.value.render()


def test_out_of_window_access_names_pc_instruction_address_window():
    text = _error("    .global k\nk:\n    li s2, 0x1f00fff8\n    vld v1, 8(s2)\n    halt\n")
    assert text == ("t.s: section .text at offset 0x8: error: pc 0x1d000008 (.text+0x8) "
                    "'vld v1, 8(s2)': load of 16 bytes at 0x1f010000: outside the mapped part of "
                    "WIN_F (0x1f000000..0x1f00ffff)")
    text = _error("    .global k\nk:\n    li s2, 0x20000000\n    sw s1, 0(s2)\n    halt\n")
    assert text.endswith("'sw s1, 0(s2)': store of 4 bytes at 0x20000000: no window maps this "
                         "address")
    text = _error("    .global k\nk:\n    li s2, 0x1d000000\n    sb s1, 0(s2)\n    halt\n")
    assert text.endswith("store of 1 byte at 0x1d000000: WIN_D is read-only")


def test_control_flow_errors():
    assert _error("    .global k\nk:\nl:\n    j l\n", max_steps=100) == (
        "t.s: section .text at offset 0x0: error: kernel did not halt within 100 instructions "
        "(now at pc 0x1d000000 (.text+0x0) 'j l'); check the loop counters or raise max_steps")
    assert "ran past the end of .text" in _error("    .global k\nk:\n    nop\n")
    assert "jump to 0x00001234, which is not an instruction of .text" in _error(
        "    .global k\nk:\n    li lr, 0x1234\n    ret\n")
    assert "branch target .+800 is outside .text" in _error("    .global k\nk:\n    j .+800\n")


def test_program_from_linked_bytes_and_entry_offset():
    obj = assemble("    nop\n    .global second\nsecond:\n    li s1, 9\n    halt\n", "t.s")
    memory, _ = make_memory()
    loaded = load_kernel(obj, memory)
    assert loaded.entry() == 8 and loaded.symbols["second"] == WIN_D + 8
    result = run(Program(obj.text, WIN_D, "raw"), memory, entry=8)
    assert result.scalar_regs[1] == 9 and result.instructions == 2
    with pytest.raises(VpucError, match="invalid instruction"):
        Program(bytes(8), WIN_D, "zeros")


def test_untaken_branch_to_the_end_is_fine():
    result = run_source("    .global k\nk:\n    li s1, 1\n    beqz s1, end\n    halt\nend:\n")
    assert result.instructions == 3
    assert "branch target .+16 is outside .text" in _error(
        "    .global k\nk:\n    beqz s1, end\n    halt\nend:\n")


def test_registers_and_counts_worked_out_when_first_read():
    """The result's opcode counts, vector and mask registers are made on first read (a
    model reads only status and cycles): the final registers all the same, also after
    pickling or ``dataclasses.replace``."""
    import dataclasses
    import pickle
    from runtime_sim.isa import load_kernel, run
    from shave_testlib import make_memory
    source = "\n".join(["    .global k", "k:", "    li s1, 0x3C00BC00", "    vbcast.w v3, s1",
                        "    mset m2, s1", "    vadd.f16 v4, v3, v3", "    halt"])
    memory, _ = make_memory()
    loaded = load_kernel(assemble(source, "k.s"), memory)
    results = [run(loaded.program, memory, entry=loaded.entry()) for _ in range(3)]
    copied = pickle.loads(pickle.dumps(results[1]))
    replaced = dataclasses.replace(results[2], cycles=0)
    for result in (results[0], copied, replaced):
        assert result.vector_regs[3] == bytes.fromhex("00bc003c") * 4
        assert result.vector_regs[4] == bytes.fromhex("00c00040") * 4     # -2.0, 2.0
        assert result.mask_regs[2] == 0xBC00
        assert result.opcode_counts == {"li": 1, "vbcast.w": 1, "mset": 1, "vadd.f16": 1,
                                        "halt": 1}
    assert copied == results[0] and replaced.cycles == 0
