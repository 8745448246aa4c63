// convert: output = input converted to the output's element type (round to
// nearest even), elementwise.  One kernel for every direction: it reads the
// dataType of each MemRefData.
//   contract: convert(input: memref<*xA>, output: memref<*xB>), A, B in {f16, bf16, f32}
//   params:   struct { MemRefData input, output; }              64 bytes
// f16 -> f32 and bf16 -> f32 are exact; f32 -> f16 and f32 -> bf16 round to
// nearest even (overflow to inf), as numpy's (ml_dtypes') astype; f16 <-> bf16
// widen to f32 exactly and round once; A = B copies.

    .global convert
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .equ DT_BF16, 15            # the dataType code of bf16 (vpuc/abi/dtypes.py)
    .text
convert:                        # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- convert: setup and compute ----
// setup: f16, bf16 or f32 on each side: s0 = 0, else E_TYPE
setup:
    li       s0, E_TYPE
    .irp     side, s6, s7
    seqi     s2, \side, DT_F16
    seqi     s3, \side, DT_F32
    or       s2, s2, s3
    seqi     s3, \side, DT_BF16
    or       s2, s2, s3
    beqz     s2, k_setup_end
    .endr
    li       s0, 0
k_setup_end:
    ret

// the head of each direction DIR (narrow, widen): vectors of 8 elements (in
// the f16 operand), blocks of 4 of them first, then single vectors (into
// k_DIR_one), then a masked tail of 0..7 elements
    .macro cv_head dir
k_\dir:
    srli     s8, s5, 3            # vectors of 8 elements
    andi     s9, s5, 7            # then elements (0..7)
    beqz     s8, k_\dir\()_tail
    srli     s10, s8, 2           # blocks of 32 elements
    bnez     s10, k_\dir\()_blocks
k_\dir\()_rest:
    andi     s8, s8, 3            # vectors after the blocks (0..3)
    beqz     s8, k_\dir\()_tail
k_\dir\()_one:
    .endm
// the tail's masks of two f32 vectors: LO for elements 0..3, HI for 4..7 (of s9)
    .macro cv_masks_w lo, hi
    vmask.w  \lo, s9
    addi     s10, s9, -4
    li       s11, 0
    max      s10, s10, s11
    vmask.w  \hi, s10
    .endm
// an f16 vector V widened into two f32 vectors LO, HI
    .macro cv_widen lo, hi, v
    vcvtl.f32.f16 \lo, \v
    vcvth.f32.f16 \hi, \v
    .endm

compute:
    li       s8, DT_F16
    beq      s6, s7, k_same
    li       s10, DT_BF16
    beq      s6, s10, k_from_bf16
    beq      s7, s10, k_to_bf16
    beq      s6, s8, k_widen
// f32 -> NARROW (f16 or bf16, by the instruction CVT): two f32 vectors in, one
// 16-bit vector out.  Blocks of 32 elements (8 vectors in, 4 out), software-
// pipelined: iteration i loads block i and rounds and stores block i-1; then 8
// elements at a time, then a masked tail.
    .macro cv_narrow dir, cvt
    cv_head  \dir
    vld      v1, 0(s2)
    vld      v2, 16(s2)
    addi     s2, s2, 32
    \cvt v0, v1, v2
    vst      v0, 0(s4)
    addi     s4, s4, 16
    loop     s8, k_\dir\()_one
k_\dir\()_tail:
    beqz     s9, k_done
    cv_masks_w m0, m1
    vmask.h  m2, s9
    vld.m    v1, 0(s2), m0
    vld.m    v2, 16(s2), m1
    \cvt v0, v1, v2
    vst.m    v0, 0(s4), m2
    ret
k_\dir\()_blocks:                  # prologue: block 0
    .irp     r, 0, 1, 2, 3, 4, 5, 6, 7
    vld      v\r, 16 * \r(s2)
    .endr
    addi     s2, s2, 128
    addi     s10, s10, -1
    beqz     s10, k_\dir\()_last
k_\dir\()_loop:
    \cvt v8, v0, v1
    vld      v0, 0(s2)
    vld      v1, 16(s2)
    \cvt v9, v2, v3
    vld      v2, 32(s2)
    vld      v3, 48(s2)
    addi     s2, s2, 128
    \cvt v10, v4, v5
    vld      v4, -64(s2)
    vld      v5, -48(s2)
    vst      v8, 0(s4)
    \cvt v11, v6, v7
    vld      v6, -32(s2)
    vld      v7, -16(s2)
    .irp     r, 9, 10, 11
    vst      v\r, 16 * (\r - 8)(s4)
    .endr
    addi     s4, s4, 64           # after the stores that use it
    loop     s10, k_\dir\()_loop
k_\dir\()_last:                    # epilogue: the last block
    \cvt v8, v0, v1
    \cvt v9, v2, v3
    \cvt v10, v4, v5
    \cvt v11, v6, v7
    .irp     r, 8, 9, 10, 11
    vst      v\r, 16 * (\r - 8)(s4)
    .endr
    addi     s4, s4, 64
    j        k_\dir\()_rest
    .endm
    cv_narrow narrow, vcvt.f16.f32
// f16 -> f32: one f16 vector in, two f32 vectors out.  Blocks of 32 elements
// (4 vectors in, 8 out), software-pipelined as above; then 8 elements at a
// time, then a masked tail.
    cv_head  widen
    vld      v0, 0(s2)
    addi     s2, s2, 16
    cv_widen v1, v2, v0
    vst      v1, 0(s4)
    vst      v2, 16(s4)
    addi     s4, s4, 32
    loop     s8, k_widen_one
k_widen_tail:
    beqz     s9, k_done
    vmask.h  m0, s9
    cv_masks_w m1, m2
    vld.m    v0, 0(s2), m0
    cv_widen v1, v2, v0
    vst.m    v1, 0(s4), m1
    vst.m    v2, 16(s4), m2
k_done:
    ret
k_widen_blocks:                   # prologue: block 0
    .irp     r, 0, 1, 2, 3
    vld      v\r, 16 * \r(s2)
    .endr
    addi     s2, s2, 64
    addi     s10, s10, -1
    beqz     s10, k_widen_last
k_widen_loop:
    cv_widen v4, v5, v0
    vld      v0, 0(s2)
    cv_widen v6, v7, v1
    vld      v1, 16(s2)
    vst      v4, 0(s4)
    vst      v5, 16(s4)
    addi     s2, s2, 64
    cv_widen v8, v9, v2
    vld      v2, -32(s2)
    vst      v6, 32(s4)
    vst      v7, 48(s4)
    cv_widen v10, v11, v3
    vld      v3, -16(s2)
    .irp     r, 8, 9, 10, 11
    vst      v\r, 16 * (\r - 4)(s4)
    .endr
    addi     s4, s4, 128          # after the stores that use it
    loop     s10, k_widen_loop
k_widen_last:                     # epilogue: the last block
    cv_widen v4, v5, v0
    cv_widen v6, v7, v1
    cv_widen v8, v9, v2
    cv_widen v10, v11, v3
    .irp     r, 4, 5, 6, 7, 8, 9, 10, 11
    vst      v\r, 16 * (\r - 4)(s4)
    .endr
    addi     s4, s4, 128
    j        k_widen_rest
// ---- bf16 on one side: 8 elements at a time, then a masked tail ----
// f32 -> bf16: as f32 -> f16 (cv_narrow), with the bf16 rounding
k_to_bf16:
    li       s8, DT_F32
    bne      s6, s8, k_f16_bf16
    j        k_narrowbf
    cv_narrow narrowbf, vcvt.bf16.f32
// f16 -> bf16: widened to f32 (exact), rounded once
k_f16_bf16:
    srli     s8, s5, 3
    andi     s9, s5, 7
    beqz     s8, k_f16_bf16_tail
k_f16_bf16_one:
    vld      v0, 0(s2)
    addi     s2, s2, 16
    cv_widen v1, v2, v0
    vcvt.bf16.f32 v3, v1, v2
    vst      v3, 0(s4)
    addi     s4, s4, 16
    loop     s8, k_f16_bf16_one
k_f16_bf16_tail:
    beqz     s9, k_done
    vmask.h  m0, s9
    vld.m    v0, 0(s2), m0
    cv_widen v1, v2, v0
    vcvt.bf16.f32 v3, v1, v2
    vst.m    v3, 0(s4), m0
    ret
// bf16 -> f32: one bf16 vector in, two f32 vectors out (exact)
k_from_bf16:
    li       s8, DT_F32
    bne      s7, s8, k_bf16_f16
    srli     s8, s5, 3
    andi     s9, s5, 7
    beqz     s8, k_bf16_f32_tail
k_bf16_f32_one:
    vld      v0, 0(s2)
    addi     s2, s2, 16
    vcvtl.f32.bf16 v1, v0
    vcvth.f32.bf16 v2, v0
    vst      v1, 0(s4)
    vst      v2, 16(s4)
    addi     s4, s4, 32
    loop     s8, k_bf16_f32_one
k_bf16_f32_tail:
    beqz     s9, k_done
    vmask.h  m0, s9
    cv_masks_w m1, m2
    vld.m    v0, 0(s2), m0
    vcvtl.f32.bf16 v1, v0
    vcvth.f32.bf16 v2, v0
    vst.m    v1, 0(s4), m1
    vst.m    v2, 16(s4), m2
    ret
// bf16 -> f16: widened to f32 (exact), rounded once
k_bf16_f16:
    srli     s8, s5, 3
    andi     s9, s5, 7
    beqz     s8, k_bf16_f16_tail
k_bf16_f16_one:
    vld      v0, 0(s2)
    addi     s2, s2, 16
    vcvtl.f32.bf16 v1, v0
    vcvth.f32.bf16 v2, v0
    vcvt.f16.f32 v3, v1, v2
    vst      v3, 0(s4)
    addi     s4, s4, 16
    loop     s8, k_bf16_f16_one
k_bf16_f16_tail:
    beqz     s9, k_done
    vmask.h  m0, s9
    vld.m    v0, 0(s2), m0
    vcvtl.f32.bf16 v1, v0
    vcvth.f32.bf16 v2, v0
    vcvt.f16.f32 v3, v1, v2
    vst.m    v3, 0(s4), m0
    ret
// the same type: a byte copy
k_same:
    lw       s8, F_ES(s16)
    .include "include/byte_copy.inc"
