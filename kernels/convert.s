// convert: output = input converted to the output's element type (round to
// nearest even), elementwise.  One kernel for both directions: it reads the
// dataType of each MemRefData.
//   contract: convert(input: memref<*xA>, output: memref<*xB>), A, B in {f16, f32}
//   params:   struct { MemRefData input, output; }              64 bytes
// f16 -> f32 is exact; f32 -> f16 rounds to nearest even (overflow to inf), as
// numpy's astype; A = B copies.

    .global convert
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
convert:                        # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- convert: setup and compute ----
// setup: f16 or f32 on each side
    setup_float_in_out

compute:
    li       s8, DT_F16
    beq      s6, s7, k_same
    beq      s6, s8, k_widen
// f32 -> f16: two f32 vectors in, one f16 vector out
k_narrow:
    srli     s8, s5, 3
    andi     s9, s5, 7
    beqz     s8, k_narrow_tail
k_narrow_loop:
    vld      v1, 0(s2)
    vld      v2, 16(s2)
    addi     s2, s2, 32
    vcvt.f16.f32 v0, v1, v2
    vst      v0, 0(s4)
    addi     s4, s4, 16
    loop     s8, k_narrow_loop
k_narrow_tail:
    beqz     s9, k_done
    vmask.w  m0, s9
    addi     s10, s9, -4
    li       s11, 0
    max      s10, s10, s11
    vmask.w  m1, s10
    vmask.h  m2, s9
    vld.m    v1, 0(s2), m0
    vld.m    v2, 16(s2), m1
    vcvt.f16.f32 v0, v1, v2
    vst.m    v0, 0(s4), m2
    ret
// f16 -> f32: one f16 vector in, two f32 vectors out
k_widen:
    srli     s8, s5, 3
    andi     s9, s5, 7
    beqz     s8, k_widen_tail
k_widen_loop:
    vld      v0, 0(s2)
    addi     s2, s2, 16
    vcvtl.f32.f16 v1, v0
    vcvth.f32.f16 v2, v0
    vst      v1, 0(s4)
    vst      v2, 16(s4)
    addi     s4, s4, 32
    loop     s8, k_widen_loop
k_widen_tail:
    beqz     s9, k_done
    vmask.h  m0, s9
    vmask.w  m1, s9
    addi     s10, s9, -4
    li       s11, 0
    max      s10, s10, s11
    vmask.w  m2, s10
    vld.m    v0, 0(s2), m0
    vcvtl.f32.f16 v1, v0
    vcvth.f32.f16 v2, v0
    vst.m    v1, 0(s4), m1
    vst.m    v2, 16(s4), m2
k_done:
    ret
// the same type: a byte copy
k_same:
    lw       s8, F_ES(s16)
    .include "include/byte_copy.inc"
