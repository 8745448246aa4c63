"""What the ``test_fastpath*.py`` tests share: a kernel run exactly and through the fast
path with identical outcomes asserted (``run_both``), fills, and the kernels and drawn
bodies several of them run."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import strategies as st

from runtime_sim.isa import load_kernel, run
from runtime_sim.isa.fastpath import FastLoops
from shave_testlib import WIN_E, make_memory
from vpuc.diagnostics import VpucError
from vpuc.shave import assemble

ARGS = WIN_E                       # the kernels read their arguments as u32 words here


def run_both(source: str, words: list[int], fill=None, *, sizes=(4096, 4096, 65536),
             max_steps: int = 1_000_000, **fast_options):
    """Run ``source`` exactly and through the fast path; assert identical outcomes.
    Returns (fast result or error text, the fast path's FastLoops, WIN_F after)."""
    obj = assemble(source, "loop.s")
    outcomes = []
    for fast in (False, True):
        memory, arrays = make_memory(*sizes)
        if fill is not None:
            fill(arrays)
        args = struct.pack(f"<{len(words)}I", *[w & 0xFFFFFFFF for w in words])
        arrays["WIN_E"][:len(args)] = np.frombuffer(args, np.uint8)
        loaded = load_kernel(obj, memory)
        loops = FastLoops(loaded.program, **fast_options) if fast else False
        try:
            result = run(loaded.program, memory, entry=loaded.entry(), args_addr=ARGS,
                         args_size=len(args), max_steps=max_steps, fast=loops)
        except VpucError as exc:
            result = str(exc)
        outcomes.append((result, {k: v.copy() for k, v in arrays.items()}, loops))
    (exact, exact_mem, _), (fast, fast_mem, loops) = outcomes
    if isinstance(exact, str) or isinstance(fast, str):
        assert fast == exact
    else:
        for name in exact.__dataclass_fields__:
            if name != "batched_iterations":
                assert getattr(fast, name) == getattr(exact, name), name
        assert exact.batched_iterations == 0
    for window in exact_mem:
        assert np.array_equal(fast_mem[window], exact_mem[window]), window
    return fast, loops, fast_mem["WIN_F"]


def random_fill(seed: int):
    def fill(arrays):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal(len(arrays["WIN_F"]) // 2) * 4).astype(np.float16)
        arrays["WIN_F"][:] = x.view(np.uint8)
    return fill


def counted_loop(prologue: str, step: str, back_edge: str) -> str:
    return f"""
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
{prologue}
body:
    vld v1, 0(s2)
    vmul.f16 v1, v1, v1
    vst v1, 0(s3)
    addi s2, s2, 16
    addi s3, s3, 16
{step}
    {back_edge}
    halt
"""


# (name) -> prologue, induction step, back-edge, iterations batched (all of them: the
# interpreter offers the loop on falling into its head)
BACK_EDGES = {
    "bne-end-pointer": ("    addi s5, s2, 1600", "", "bne s2, s5, body", 100),
    "bltu-end-pointer": ("    addi s5, s2, 1599", "", "bltu s2, s5, body", 100),
    "bnez-countdown": ("    li s4, 100", "    addi s4, s4, -1", "bnez s4, body", 100),
    "blt-signed-up": ("    li s4, -50\n    li s5, 100", "    addi s4, s4, 3", "blt s4, s5, body",
                      50),
    "bge-down": ("    li s4, 200\n    li s5, 3", "    addi s4, s4, -2", "bge s4, s5, body", 99),
    "bgeu-down": ("    li s4, 99\n    li s6, 1", "    sub s4, s4, s6", "bgeu s4, s6, body", 99),
    "bne-two-inductions": ("    li s4, 0\n    li s5, 300", "    addi s4, s4, 5\n    addi s5, s5, 2",
                           "bne s4, s5, body", 100),
    "beq-runs-twice": ("    li s4, 6\n    li s5, 7", "    addi s4, s4, 1", "beq s4, s5, body", 2),
}


RECURRENCE = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
body:
    vld v1, 0(s2)
    vld v2, OFFSET(s3)
    vadd.f16 v1, v1, v2
    vst v1, 0(s3)
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    halt
"""


# The random loop kernels' common start: the three argument words (source, destination,
# count) and the scalar and vector constants their drawn bodies may read.
def random_kernel_head(seed: int) -> list[str]:
    return ["    .global k", "k:", "    lw s2, 0(s0)", "    lw s3, 4(s0)", "    lw s4, 8(s0)",
            "    li.f16 s20, 1.25", "    vbcast.h v20, s20", "    li s21, 0x3f800000",
            "    vbcast.w v21, s21", f"    li s22, {-6 if seed % 2 else 10}"]


# The back-edges a drawn loop closes with (``bltu`` against the end address in s23).
DRAWN_BACK_EDGES = {"loop": ["    loop s4, body"],
               "bnez": ["    addi s4, s4, -1", "    bnez s4, body"],
               "bltu": ["    bltu s2, s23, body"]}


VECTOR_OPS = ["vadd.f16", "vsub.f16", "vmul.f16", "vmax.f16", "vmin.f32", "vadd.f32",
              "vand", "vxor", "vadd.i32", "vmin.u8", "vsub.i16", "vmul.i16", "vcvt.f16.f32",
              "vdiv.f16"]
UNARY_OPS = ["vabs.f16", "vneg.f32", "vcvtl.f32.f16", "vcvth.f32.f16", "vrcp.f16", "vexp.f16",
             "vmov"]


@st.composite
def straight_line_body(draw):
    """A loop body over two walking pointers: mostly well-formed (registers
    defined before use), sometimes carrying a value or aliasing memory."""
    defined_v, defined_s = ["v20", "v21"], ["s20"]
    lines = []
    for _ in range(draw(st.integers(1, 10))):
        choice = draw(st.integers(0, 9))
        pick_v = st.sampled_from(defined_v + (["v3"] if draw(st.integers(0, 9)) == 0 else []))
        dest_v = draw(st.sampled_from(["v1", "v2", "v3", "v4"]))
        off = draw(st.sampled_from([0, 2, 16, 32, -16, 48]))
        if choice in (0, 1):
            lines.append(f"vld {dest_v}, {off}(s2)")
        elif choice == 2:
            lines.append(f"{draw(st.sampled_from(VECTOR_OPS))} {dest_v}, {draw(pick_v)}, "
                         f"{draw(pick_v)}")
        elif choice == 3:
            lines.append(f"{draw(st.sampled_from(UNARY_OPS))} {dest_v}, {draw(pick_v)}")
        elif choice == 4:
            lines.append(f"vst {draw(pick_v)}, {off}(s3)")
            continue
        elif choice == 5:
            lines.append(f"lhu s9, {off}(s2)")
            lines.append(f"add s10, s9, {draw(st.sampled_from(defined_s))}")
            lines.append(f"sh s10, {off + 64}(s3)")
            defined_s += ["s9", "s10"]
            continue
        elif choice == 6:
            lines.append(f"vmask.h m1, s4")
            lines.append(f"vst.m {draw(pick_v)}, {off}(s3), m1")
            continue
        elif choice == 7:
            lines.append(f"vcmplt.f16 m2, {draw(pick_v)}, {draw(pick_v)}")
            lines.append(f"vsel {dest_v}, {draw(pick_v)}, {draw(pick_v)}, m2")
        elif choice == 8:
            lines.append(f"vlds.h {dest_v}, {off}(s2), s22")
        else:
            lines.append(f"vext.h s11, {draw(pick_v)}, {draw(st.integers(0, 7))}")
            lines.append(f"vins.h {draw(pick_v)}, s11, {draw(st.integers(0, 7))}")
            continue
        if dest_v not in defined_v:
            defined_v.append(dest_v)
    src_step = draw(st.sampled_from([16, 32, 8, -16]))
    dst_step = draw(st.sampled_from([16, 64, 0, -32]))
    edges = ["loop", "bnez", "bltu"] if src_step > 0 else ["loop", "bnez"]
    back_edge = draw(st.sampled_from(edges))
    return (lines, src_step, dst_step, draw(st.integers(1, 40)), draw(st.integers(1, 9)),
            back_edge)


def special_fill(seed: int):
    """Random halves, with NaNs (quiet and signalling, either sign), infinities and
    zeros of both signs sprinkled in when the random seed asks for them."""
    def fill(arrays):
        random_fill(seed)(arrays)
        if seed % 3:
            rng = np.random.default_rng(seed)
            halves = arrays["WIN_F"].view(np.uint16)
            where = rng.integers(0, len(halves), len(halves) // 64)
            halves[where] = rng.choice([0x7E00, 0xFE01, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0000,
                                        0x7FFF, 0x3C00], len(where))
    return fill


# Kernels other test modules run too (test_together, the split test_fastpath*).
STRIDED = """
    .global k
k:
    lw s2, 0(s0)            # source
    lw s3, 4(s0)            # destination
    lw s4, 8(s0)            # iterations
    lw s5, 12(s0)           # source row pitch (bytes)
    li s7, 4                # destination lane stride
    slli s6, s5, 3          # eight rows per vector
    li.f16 s12, 0.5
    vbcast.h v4, s12
body:
    vlds.h v1, 0(s2), s5    # one column, eight rows
    vfma.f16 v2, v1, v4, v1
    vsts.h v2, 2(s3), s7    # every other half-word
    lhu s9, 6(s2)
    muli s10, s9, 3
    sh s10, 0(s3)
    vlds.m.w v3, 8(s2), s5, m0
    vsts.m.w v3, 40(s3), s7, m0
    add s2, s2, s6
    addi s3, s3, 64
    loop s4, body
    halt
"""


PIPELINED = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
    li.f16 s9, 0.5
    vbcast.h v7, s9
    vld v5, 0(s2)               # prologue: stage 1 of iteration 0
    addi s2, s2, 16
body:
    vmul.f16 v6, v5, v7         # stage 2 of the previous iteration (reads the carried v5)
    vst v6, -16(s3)
    vld v5, 0(s2)               # stage 1 of this one
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    vmul.f16 v6, v5, v7         # epilogue
    vst v6, -16(s3)
    halt
"""


HARDSWISH_LIKE = """
    .global k
k:
    lw s2, 0(s0)            # source
    lw s3, 4(s0)            # destination
    lw s4, 8(s0)            # iterations
    li.f32 s5, 3.0
    vbcast.w v8, s5
    li.f32 s5, 6.0
    vbcast.w v9, s5
    li.f32 s5, 0.1666666
    vbcast.w v10, s5
    li s5, 0
    vbcast.w v11, s5
body:
    vld v1, 0(s2)
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vadd.f32 v4, v2, v8
    vadd.f32 v5, v3, v8
    vmax.f32 v4, v4, v11
    vmax.f32 v5, v5, v11
    vmin.f32 v4, v4, v9
    vmin.f32 v5, v5, v9
    vmul.f32 v4, v4, v2
    vmul.f32 v5, v5, v3
    vmul.f32 v4, v4, v10
    vmul.f32 v5, v10, v5
    vcvt.f16.f32 v6, v4, v5
    vst v6, 0(s3)
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    halt
"""


ROW_SUM = """
    .global k
k:
    lw s2, 0(s0)
    lw s4, 8(s0)
    vxor v3, v3, v3
    vxor v4, v4, v4
body:
    vld v1, 0(s2)
    vcvtl.f32.f16 v5, v1
    vcvth.f32.f16 v6, v1
    vadd.f32 v3, v3, v5
    vadd.f32 v4, v4, v6
    vmax.f16 v7, v7, v1
    addi s2, s2, 16
    loop s4, body
    vadd.f32 v3, v3, v4
    vredsum.f32 s14, v3
    halt
"""
