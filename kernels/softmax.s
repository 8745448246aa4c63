// softmax over the innermost logical axis R (the last logical dim), numerically
// stable: y = exp(x - max) / sum(exp(x - max)), max / exp / sum / scale in f32.
//   contract: softmax(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// R is found through dimsOrder (with NHWC, R = W sits at memory position 1 and
// is walked with its stride).  Three passes (max, sum, scale) over each row,
// or over groups of 8 rows at once (see the reduce row block).

    .global softmax
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 1           # 0 elementwise, 1 softmax, 2 reduction
    .text
softmax:                        # entry: the shared driver
    .include "include/driver.inc"
    .include "include/reduce_row.inc"

// ---- softmax: setup, rows, groups ----
// setup: the same float type in and out; -inf constants
setup:
    mov      s15, lr
    call     drv_same_float
    mov      lr, s15
    li.f16   s3, -inf
    vbcast.h v20, s3           # -inf, f16 lanes
    li.f32   s3, -inf
    vbcast.w v21, s3           # -inf, f32 lanes
    ret

reduce_row:
    li       s8, DT_F32
    beq      s6, s8, k_row32
k_row16:
    srli     s9, s5, 4           # iterations of 16
    andi     s10, s5, 15          # tail (maybe none)
    vmask.h  m0, s10
    addi     s11, s10, -8
    li       s12, 0
    max      s11, s11, s12
    vmask.h  m1, s11
    # pass 1: the row max (f16 max is exact)
    vmov     v0, v20
    vmov     v8, v20
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_max16_tail
k_max16:
    vld      v1, 0(s12)
    vld      v9, 16(s12)
    addi     s12, s12, 32
    vmax.f16 v0, v0, v1
    vmax.f16 v8, v8, v9
    loop     s13, k_max16
k_max16_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v9, 16(s12), m1
    vsel     v1, v1, v20, m0
    vsel     v9, v9, v20, m1
    vmax.f16 v0, v0, v1
    vmax.f16 v8, v8, v9
    vmax.f16 v0, v0, v8
    vredmax.f16 s14, v0
    vbcast.w v2, s14            # max, f32 lanes
    # pass 2: the sum of exp(x - max), in f32
    vxor     v3, v3, v3
    vxor     v4, v4, v4
    vxor     v12, v12, v12
    vxor     v13, v13, v13
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_sum16_tail
k_sum16:
    vld      v1, 0(s12)
    vld      v9, 16(s12)
    addi     s12, s12, 32
    vcvtl.f32.f16 v5, v1
    vcvth.f32.f16 v6, v1
    vcvtl.f32.f16 v10, v9
    vcvth.f32.f16 v11, v9
    vsub.f32 v5, v5, v2
    vsub.f32 v6, v6, v2
    vsub.f32 v10, v10, v2
    vsub.f32 v11, v11, v2
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v10, v10
    vexp.f32 v11, v11
    vadd.f32 v3, v3, v5
    vadd.f32 v4, v4, v6
    vadd.f32 v12, v12, v10
    vadd.f32 v13, v13, v11
    loop     s13, k_sum16
k_sum16_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v9, 16(s12), m1
    vsel     v1, v1, v20, m0
    vsel     v9, v9, v20, m1
    vcvtl.f32.f16 v5, v1
    vcvth.f32.f16 v6, v1
    vcvtl.f32.f16 v10, v9
    vcvth.f32.f16 v11, v9
    vsub.f32 v5, v5, v2
    vsub.f32 v6, v6, v2
    vsub.f32 v10, v10, v2
    vsub.f32 v11, v11, v2
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v10, v10
    vexp.f32 v11, v11
    vadd.f32 v3, v3, v5
    vadd.f32 v4, v4, v6
    vadd.f32 v12, v12, v10
    vadd.f32 v13, v13, v11
    vadd.f32 v3, v3, v4
    vadd.f32 v12, v12, v13
    vadd.f32 v3, v3, v12
    vredsum.f32 s14, v3
    vbcast.w v7, s14
    vrcp.f32 v7, v7            # 1 / sum
    # pass 3: exp(x - max) / sum, rounded once to f16
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_out16_tail
k_out16:
    vld      v1, 0(s12)
    vld      v9, 16(s12)
    addi     s12, s12, 32
    vcvtl.f32.f16 v5, v1
    vcvth.f32.f16 v6, v1
    vcvtl.f32.f16 v10, v9
    vcvth.f32.f16 v11, v9
    vsub.f32 v5, v5, v2
    vsub.f32 v6, v6, v2
    vsub.f32 v10, v10, v2
    vsub.f32 v11, v11, v2
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v10, v10
    vexp.f32 v11, v11
    vmul.f32 v5, v5, v7
    vmul.f32 v6, v6, v7
    vmul.f32 v10, v10, v7
    vmul.f32 v11, v11, v7
    vcvt.f16.f32 v1, v5, v6
    vcvt.f16.f32 v9, v10, v11
    vst      v1, 0(s4)
    vst      v9, 16(s4)
    addi     s4, s4, 32
    loop     s13, k_out16
k_out16_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v9, 16(s12), m1
    vcvtl.f32.f16 v5, v1
    vcvth.f32.f16 v6, v1
    vcvtl.f32.f16 v10, v9
    vcvth.f32.f16 v11, v9
    vsub.f32 v5, v5, v2
    vsub.f32 v6, v6, v2
    vsub.f32 v10, v10, v2
    vsub.f32 v11, v11, v2
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v10, v10
    vexp.f32 v11, v11
    vmul.f32 v5, v5, v7
    vmul.f32 v6, v6, v7
    vmul.f32 v10, v10, v7
    vmul.f32 v11, v11, v7
    vcvt.f16.f32 v1, v5, v6
    vcvt.f16.f32 v9, v10, v11
    vst.m    v1, 0(s4), m0
    vst.m    v9, 16(s4), m1
    ret
k_row32:
    srli     s9, s5, 3           # iterations of 8
    andi     s10, s5, 7          # tail (maybe none)
    vmask.w  m0, s10
    addi     s11, s10, -4
    li       s12, 0
    max      s11, s11, s12
    vmask.w  m1, s11
    # pass 1: the row max
    vmov     v0, v21
    vmov     v8, v21
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_max32_tail
k_max32:
    vld      v1, 0(s12)
    vld      v9, 16(s12)
    addi     s12, s12, 32
    vmax.f32 v0, v0, v1
    vmax.f32 v8, v8, v9
    loop     s13, k_max32
k_max32_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v9, 16(s12), m1
    vsel     v1, v1, v21, m0
    vsel     v9, v9, v21, m1
    vmax.f32 v0, v0, v1
    vmax.f32 v8, v8, v9
    vmax.f32 v0, v0, v8
    vredmax.f32 s14, v0
    vbcast.w v2, s14            # max, f32 lanes
    # pass 2: the sum of exp(x - max), in f32
    vxor     v3, v3, v3
    vxor     v12, v12, v12
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_sum32_tail
k_sum32:
    vld      v1, 0(s12)
    vld      v9, 16(s12)
    addi     s12, s12, 32
    vsub.f32 v1, v1, v2
    vsub.f32 v9, v9, v2
    vexp.f32 v1, v1
    vexp.f32 v9, v9
    vadd.f32 v3, v3, v1
    vadd.f32 v12, v12, v9
    loop     s13, k_sum32
k_sum32_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v9, 16(s12), m1
    vsel     v1, v1, v21, m0
    vsel     v9, v9, v21, m1
    vsub.f32 v1, v1, v2
    vsub.f32 v9, v9, v2
    vexp.f32 v1, v1
    vexp.f32 v9, v9
    vadd.f32 v3, v3, v1
    vadd.f32 v12, v12, v9
    vadd.f32 v3, v3, v12
    vredsum.f32 s14, v3
    vbcast.w v7, s14
    vrcp.f32 v7, v7            # 1 / sum
    # pass 3: exp(x - max) / sum
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_out32_tail
k_out32:
    vld      v1, 0(s12)
    vld      v9, 16(s12)
    addi     s12, s12, 32
    vsub.f32 v1, v1, v2
    vsub.f32 v9, v9, v2
    vexp.f32 v1, v1
    vexp.f32 v9, v9
    vmul.f32 v1, v1, v7
    vmul.f32 v9, v9, v7
    vst      v1, 0(s4)
    vst      v9, 16(s4)
    addi     s4, s4, 32
    loop     s13, k_out32
k_out32_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v9, 16(s12), m1
    vsub.f32 v1, v1, v2
    vsub.f32 v9, v9, v2
    vexp.f32 v1, v1
    vexp.f32 v9, v9
    vmul.f32 v1, v1, v7
    vmul.f32 v9, v9, v7
    vst.m    v1, 0(s4), m0
    vst.m    v9, 16(s4), m1
    ret

reduce_group:
    li       s12, DT_F32
    beq      s6, s12, k_g32
k_g16:
    vmask.h  m0, s11            # active lanes
    vmov     v0, v21
    vmov     v8, v21
    mov      s12, s2
    mov      s13, s5
k_g16_max:
    vlds.m.h v1, 0(s12), s3, m0
    add      s12, s12, s8
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vmax.f32 v0, v0, v2
    vmax.f32 v8, v8, v3
    loop     s13, k_g16_max
    vxor     v4, v4, v4
    vxor     v9, v9, v9
    mov      s12, s2
    mov      s13, s5
k_g16_sum:
    vlds.m.h v1, 0(s12), s3, m0
    add      s12, s12, s8
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vsub.f32 v2, v2, v0
    vsub.f32 v3, v3, v8
    vexp.f32 v2, v2
    vexp.f32 v3, v3
    vadd.f32 v4, v4, v2
    vadd.f32 v9, v9, v3
    loop     s13, k_g16_sum
    vrcp.f32 v4, v4
    vrcp.f32 v9, v9
    mov      s12, s2
    mov      s14, s4
    mov      s13, s5
k_g16_out:
    vlds.m.h v1, 0(s12), s3, m0
    add      s12, s12, s8
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vsub.f32 v2, v2, v0
    vsub.f32 v3, v3, v8
    vexp.f32 v2, v2
    vexp.f32 v3, v3
    vmul.f32 v2, v2, v4
    vmul.f32 v3, v3, v9
    vcvt.f16.f32 v1, v2, v3
    vsts.m.h v1, 0(s14), s10, m0
    add      s14, s14, s9
    loop     s13, k_g16_out
    ret
k_g32:
    vmask.w  m0, s11            # active lanes 0..3
    addi     s12, s11, -4
    li       s13, 0
    max      s12, s12, s13
    vmask.w  m1, s12            # and 4..7
    slli     s6, s3, 2            # lane 4, from lane 0
    slli     s7, s10, 2
    vmov     v0, v21
    vmov     v8, v21
    mov      s12, s2
    add      s15, s2, s6
    mov      s13, s5
k_g32_max:
    vlds.m.w v2, 0(s12), s3, m0
    vlds.m.w v3, 0(s15), s3, m1
    add      s12, s12, s8
    add      s15, s15, s8
    vmax.f32 v0, v0, v2
    vmax.f32 v8, v8, v3
    loop     s13, k_g32_max
    vxor     v4, v4, v4
    vxor     v9, v9, v9
    mov      s12, s2
    add      s15, s2, s6
    mov      s13, s5
k_g32_sum:
    vlds.m.w v2, 0(s12), s3, m0
    vlds.m.w v3, 0(s15), s3, m1
    add      s12, s12, s8
    add      s15, s15, s8
    vsub.f32 v2, v2, v0
    vsub.f32 v3, v3, v8
    vexp.f32 v2, v2
    vexp.f32 v3, v3
    vadd.f32 v4, v4, v2
    vadd.f32 v9, v9, v3
    loop     s13, k_g32_sum
    vrcp.f32 v4, v4
    vrcp.f32 v9, v9
    mov      s12, s2
    add      s15, s2, s6
    mov      s14, s4
    add      s7, s4, s7
    mov      s13, s5
k_g32_out:
    vlds.m.w v2, 0(s12), s3, m0
    vlds.m.w v3, 0(s15), s3, m1
    add      s12, s12, s8
    add      s15, s15, s8
    vsub.f32 v2, v2, v0
    vsub.f32 v3, v3, v8
    vexp.f32 v2, v2
    vexp.f32 v3, v3
    vmul.f32 v2, v2, v4
    vmul.f32 v3, v3, v9
    vsts.m.w v2, 0(s14), s10, m0
    vsts.m.w v3, 0(s7), s10, m1
    add      s14, s14, s9
    add      s7, s7, s9
    loop     s13, k_g32_out
    ret
