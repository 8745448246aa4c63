// clamp: output = min(max(input, minVal), maxVal), elementwise (the seed's example).
//   contract: clamp(input: memref<*xT>, output: memref<*xT>, minVal: f16, maxVal: f16)
//             T = f16 or f32 (the bounds stay f16 in the params; widened for f32)
//   params:   struct { MemRefData input, output; f16 minVal, maxVal; }   68 bytes
// Computed in the tensor's type (exact).  NaN stays NaN.

    .global clamp
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .equ SCALARS, 64          # minVal, maxVal: after the two MemRefData
    .text
clamp:                          # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- clamp: setup and compute ----
// setup: same float type everywhere; minVal/maxVal (f16 scalars) into v16/v17
    setup_same_float
    lhu      s3, SCALARS(s17)         # minVal
    lhu      s4, SCALARS + 2(s17)     # maxVal
    bnez     s2, k_setup_f32
    vbcast.h v16, s3
    vbcast.h v17, s4
    ret
k_setup_f32:
    fcvt.f32.f16 s3, s3
    fcvt.f32.f16 s4, s4
    vbcast.w v16, s3
    vbcast.w v17, s4
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
    addi     s2, s2, 32
    vmax.f16 v1, v1, v16
    vmax.f16 v2, v2, v16
    vmin.f16 v1, v1, v17
    vmin.f16 v2, v2, v17
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
    vmax.f16 v1, v1, v16
    vmax.f16 v2, v2, v16
    vmin.f16 v1, v1, v17
    vmin.f16 v2, v2, v17
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
    addi     s2, s2, 32
    vmax.f32 v1, v1, v16
    vmax.f32 v2, v2, v16
    vmin.f32 v1, v1, v17
    vmin.f32 v2, v2, v17
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
    vmax.f32 v1, v1, v16
    vmax.f32 v2, v2, v16
    vmin.f32 v1, v1, v17
    vmin.f32 v2, v2, v17
    vst.m    v1, 0(s4), m0
    vst.m    v2, 16(s4), m1
k_f32_done:
    ret
