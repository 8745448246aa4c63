// reduce_mean: the mean over the innermost logical axis R (the last logical dim);
// the output has extent 1 along R.  Accumulates in f32.
//   contract: reduce_mean(input: memref<*xA>, output: memref<*xB>), A, B in {f16, f32}
//   params:   struct { MemRefData input, output; }              64 bytes
// R is found through dimsOrder.  Rows (R dense and long) accumulate 8 lanes per
// step and finish with a pairwise tree; groups accumulate 8 rows at once, one
// per lane, stepping along R with its stride (see the reduce row block).
// The mean is sum / n, the f32 division correctly rounded.

    .global reduce_mean
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 2           # 0 elementwise, 1 softmax, 2 reduction
    .text
reduce_mean:                    # entry: the shared driver
    .include "include/driver.inc"
    .include "include/reduce_row.inc"

// ---- reduce_mean: setup, rows, groups ----
// setup: f16 or f32 on each side
setup:
    li       s0, E_TYPE
    seqi     s2, s6, DT_F16
    seqi     s3, s6, DT_F32
    or       s2, s2, s3
    beqz     s2, k_setup_end
    seqi     s2, s7, DT_F16
    seqi     s3, s7, DT_F32
    or       s2, s2, s3
    beqz     s2, k_setup_end
    li       s0, 0
k_setup_end:
    ret

reduce_row:
    mov      s15, s5           # n
    vxor     v0, v0, v0
    vxor     v1, v1, v1
    li       s8, DT_F32
    beq      s6, s8, k_row32
k_row16:
    srli     s9, s5, 3
    andi     s10, s5, 7
    beqz     s9, k_row16_tail
k_row16_loop:
    vld      v2, 0(s2)
    addi     s2, s2, 16
    vcvtl.f32.f16 v3, v2
    vcvth.f32.f16 v4, v2
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
    loop     s9, k_row16_loop
k_row16_tail:
    vmask.h  m0, s10            # maybe no lanes: adds zeros
    vld.m    v2, 0(s2), m0
    vcvtl.f32.f16 v3, v2
    vcvth.f32.f16 v4, v2
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
    j        k_row_total
k_row32:
    srli     s9, s5, 3
    andi     s10, s5, 7
    beqz     s9, k_row32_tail
k_row32_loop:
    vld      v3, 0(s2)
    vld      v4, 16(s2)
    addi     s2, s2, 32
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
    loop     s9, k_row32_loop
k_row32_tail:
    vmask.w  m0, s10
    addi     s11, s10, -4
    li       s12, 0
    max      s11, s11, s12
    vmask.w  m1, s11
    vld.m    v3, 0(s2), m0
    vld.m    v4, 16(s2), m1
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
k_row_total:
    vadd.f32 v0, v0, v1
    vredsum.f32 s8, v0          # pairwise over the 4 lanes
    fcvt.f32.u32 s9, s15
    fdiv     s8, s8, s9           # mean = sum / n
    li       s9, DT_F32
    beq      s7, s9, k_row_store32
    fcvt.f16.f32 s8, s8
    sh       s8, 0(s4)
    ret
k_row_store32:
    sw       s8, 0(s4)
    ret

reduce_group:
    mov      s15, s5           # n
    vxor     v0, v0, v0          # sums of lanes 0..3
    vxor     v8, v8, v8          # and 4..7
    addi     s12, s11, -4
    li       s13, 0
    max      s12, s12, s13
    vmask.w  m1, s12            # f32 lanes 4..7 (loads and stores)
    vmask.w  m2, s11            # f32 lanes 0..3
    li       s12, DT_F32
    beq      s6, s12, k_g32
k_g16:
    vmask.h  m0, s11
k_g16_loop:
    vlds.m.h v1, 0(s2), s3, m0
    add      s2, s2, s8
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vadd.f32 v0, v0, v2
    vadd.f32 v8, v8, v3
    loop     s5, k_g16_loop
    j        k_g_store
k_g32:
    slli     s12, s3, 2
    add      s12, s2, s12           # lane 4
k_g32_loop:
    vlds.m.w v2, 0(s2), s3, m2
    vlds.m.w v3, 0(s12), s3, m1
    add      s2, s2, s8
    add      s12, s12, s8
    vadd.f32 v0, v0, v2
    vadd.f32 v8, v8, v3
    loop     s5, k_g32_loop
k_g_store:
    fcvt.f32.u32 s12, s15
    vbcast.w v1, s12
    vdiv.f32 v0, v0, v1       # mean = sum / n
    vdiv.f32 v8, v8, v1
    li       s12, DT_F32
    beq      s7, s12, k_g_store32
    vcvt.f16.f32 v0, v0, v8
    vmask.h  m0, s11
    vsts.m.h v0, 0(s4), s10, m0
    ret
k_g_store32:
    slli     s12, s10, 2
    add      s12, s4, s12
    vsts.m.w v0, 0(s4), s10, m2
    vsts.m.w v8, 0(s12), s10, m1
    ret
