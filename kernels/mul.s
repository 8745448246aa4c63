// mul: output = a * b, elementwise, with numpy broadcasting of size-1 dims.
//   contract: mul(a: memref<*xT>, b: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData a, b, output; }               96 bytes
// a and b have the output's rank (any dim may be 1 and broadcasts), or rank 0:
// a tensor-scalar mul passes the scalar as a rank-0 (or all-ones) memref.
// Computed in the tensor's type: correctly rounded, as numpy does it.

    .global mul
    .equ NUM_IN, 2              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
mul:                            # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- mul: setup and compute ----
// setup: every operand f16, or every operand f32
setup:
    mov      s15, lr
    call     drv_same_float
    mov      lr, s15
    bnez     s0, k_setup_end
k_setup_end:
    ret

compute:
    li       s8, DT_F32
    beq      s6, s8, k_f32
k_f16:
    srli     s8, s5, 4          # iterations of 16 elements
    andi     s9, s5, 15          # tail
    beqz     s8, k_f16_tail
k_f16_loop:
    vld      v1, 0(s2)
    vld      v2, 16(s2)
    vld      v3, 0(s3)
    vld      v4, 16(s3)
    addi     s3, s3, 32
    addi     s2, s2, 32
    vmul.f16 v1, v1, v3
    vmul.f16 v2, v2, v4
    vst      v1, 0(s4)
    vst      v2, 16(s4)
    addi     s4, s4, 32
    loop     s8, k_f16_loop
k_f16_tail:
    beqz     s9, k_f16_done
    vmask.h  m0, s9             # lanes of vector 0
    li       s11, 0
    addi     s10, s9, -8
    max      s10, s10, s11
    vmask.h  m1, s10            # of vector 1
    vld.m    v1, 0(s2), m0
    vld.m    v2, 16(s2), m1
    vld.m    v3, 0(s3), m0
    vld.m    v4, 16(s3), m1
    vmul.f16 v1, v1, v3
    vmul.f16 v2, v2, v4
    vst.m    v1, 0(s4), m0
    vst.m    v2, 16(s4), m1
k_f16_done:
    ret
k_f32:
    srli     s8, s5, 3          # iterations of 8 elements
    andi     s9, s5, 7          # tail
    beqz     s8, k_f32_tail
k_f32_loop:
    vld      v1, 0(s2)
    vld      v2, 16(s2)
    vld      v3, 0(s3)
    vld      v4, 16(s3)
    addi     s3, s3, 32
    addi     s2, s2, 32
    vmul.f32 v1, v1, v3
    vmul.f32 v2, v2, v4
    vst      v1, 0(s4)
    vst      v2, 16(s4)
    addi     s4, s4, 32
    loop     s8, k_f32_loop
k_f32_tail:
    beqz     s9, k_f32_done
    vmask.w  m0, s9             # lanes of vector 0
    li       s11, 0
    addi     s10, s9, -4
    max      s10, s10, s11
    vmask.w  m1, s10            # of vector 1
    vld.m    v1, 0(s2), m0
    vld.m    v2, 16(s2), m1
    vld.m    v3, 0(s3), m0
    vld.m    v4, 16(s3), m1
    vmul.f32 v1, v1, v3
    vmul.f32 v2, v2, v4
    vst.m    v1, 0(s4), m0
    vst.m    v2, 16(s4), m1
k_f32_done:
    ret
