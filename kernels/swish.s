// swish: output = input * sigmoid(input) = x / (1 + exp(-x)), elementwise.
//   contract: swish(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// Computed in f32 (f16 widened, rounded once at the end).

    .global swish
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
swish:                          # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- swish: setup and compute ----
// setup: every operand f16, or every operand f32
setup:
    mov      s15, lr
    call     drv_same_float
    mov      lr, s15
    bnez     s0, k_setup_end
    li.f32   s3, 1.0
    vbcast.w v16, s3           # 1.0 (f32)
k_setup_end:
    ret

compute:
    li       s8, DT_F32
    beq      s6, s8, k_f32
k_f16:
    srli     s8, s5, 4           # iterations of 16 elements
    andi     s9, s5, 15          # tail
    beqz     s8, k_f16_tail
k_f16_loop:
    vld      v0, 0(s2)
    vld      v7, 16(s2)
    addi     s2, s2, 32
    vcvtl.f32.f16 v1, v0
    vcvth.f32.f16 v2, v0
    vcvtl.f32.f16 v9, v7
    vcvth.f32.f16 v10, v7
    vneg.f32 v5, v1
    vneg.f32 v6, v2
    vneg.f32 v13, v9
    vneg.f32 v14, v10
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v13, v13
    vexp.f32 v14, v14
    vadd.f32 v5, v5, v16
    vadd.f32 v6, v6, v16
    vadd.f32 v13, v13, v16
    vadd.f32 v14, v14, v16
    vrcp.f32 v5, v5
    vrcp.f32 v6, v6
    vrcp.f32 v13, v13
    vrcp.f32 v14, v14
    vmul.f32 v1, v1, v5
    vmul.f32 v2, v2, v6
    vmul.f32 v9, v9, v13
    vmul.f32 v10, v10, v14
    vcvt.f16.f32 v0, v1, v2
    vcvt.f16.f32 v7, v9, v10
    vst      v0, 0(s4)
    vst      v7, 16(s4)
    addi     s4, s4, 32
    loop     s8, k_f16_loop
k_f16_tail:
    beqz     s9, k_f16_done
    vmask.h  m0, s9             # lanes of vector 0
    li       s11, 0
    addi     s10, s9, -8
    max      s10, s10, s11
    vmask.h  m1, s10            # of vector 1
    vld.m    v0, 0(s2), m0
    vld.m    v7, 16(s2), m1
    vcvtl.f32.f16 v1, v0
    vcvth.f32.f16 v2, v0
    vcvtl.f32.f16 v9, v7
    vcvth.f32.f16 v10, v7
    vneg.f32 v5, v1
    vneg.f32 v6, v2
    vneg.f32 v13, v9
    vneg.f32 v14, v10
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v13, v13
    vexp.f32 v14, v14
    vadd.f32 v5, v5, v16
    vadd.f32 v6, v6, v16
    vadd.f32 v13, v13, v16
    vadd.f32 v14, v14, v16
    vrcp.f32 v5, v5
    vrcp.f32 v6, v6
    vrcp.f32 v13, v13
    vrcp.f32 v14, v14
    vmul.f32 v1, v1, v5
    vmul.f32 v2, v2, v6
    vmul.f32 v9, v9, v13
    vmul.f32 v10, v10, v14
    vcvt.f16.f32 v0, v1, v2
    vcvt.f16.f32 v7, v9, v10
    vst.m    v0, 0(s4), m0
    vst.m    v7, 16(s4), m1
k_f16_done:
    ret
k_f32:
    srli     s8, s5, 4          # iterations of 16 elements
    andi     s9, s5, 15          # tail
    beqz     s8, k_f32_tail
k_f32_loop:
    vld      v1, 0(s2)
    vld      v2, 16(s2)
    vld      v9, 32(s2)
    vld      v10, 48(s2)
    addi     s2, s2, 64
    vneg.f32 v5, v1
    vneg.f32 v6, v2
    vneg.f32 v13, v9
    vneg.f32 v14, v10
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v13, v13
    vexp.f32 v14, v14
    vadd.f32 v5, v5, v16
    vadd.f32 v6, v6, v16
    vadd.f32 v13, v13, v16
    vadd.f32 v14, v14, v16
    vrcp.f32 v5, v5
    vrcp.f32 v6, v6
    vrcp.f32 v13, v13
    vrcp.f32 v14, v14
    vmul.f32 v1, v1, v5
    vmul.f32 v2, v2, v6
    vmul.f32 v9, v9, v13
    vmul.f32 v10, v10, v14
    vst      v1, 0(s4)
    vst      v2, 16(s4)
    vst      v9, 32(s4)
    vst      v10, 48(s4)
    addi     s4, s4, 64
    loop     s8, k_f32_loop
k_f32_tail:
    beqz     s9, k_f32_done
    vmask.w  m0, s9             # lanes of vector 0
    li       s11, 0
    addi     s10, s9, -4
    max      s10, s10, s11
    vmask.w  m1, s10            # of vector 1
    addi     s10, s9, -8
    max      s10, s10, s11
    vmask.w  m2, s10            # of vector 2
    addi     s10, s9, -12
    max      s10, s10, s11
    vmask.w  m3, s10            # of vector 3
    vld.m    v1, 0(s2), m0
    vld.m    v2, 16(s2), m1
    vld.m    v9, 32(s2), m2
    vld.m    v10, 48(s2), m3
    vneg.f32 v5, v1
    vneg.f32 v6, v2
    vneg.f32 v13, v9
    vneg.f32 v14, v10
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v13, v13
    vexp.f32 v14, v14
    vadd.f32 v5, v5, v16
    vadd.f32 v6, v6, v16
    vadd.f32 v13, v13, v16
    vadd.f32 v14, v14, v16
    vrcp.f32 v5, v5
    vrcp.f32 v6, v6
    vrcp.f32 v13, v13
    vrcp.f32 v14, v14
    vmul.f32 v1, v1, v5
    vmul.f32 v2, v2, v6
    vmul.f32 v9, v9, v13
    vmul.f32 v10, v10, v14
    vst.m    v1, 0(s4), m0
    vst.m    v2, 16(s4), m1
    vst.m    v9, 32(s4), m2
    vst.m    v10, 48(s4), m3
k_f32_done:
    ret
