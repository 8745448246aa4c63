// reduce_max: the maximum over the innermost logical axis R (the last logical
// dim); the output has extent 1 along R.  Exact: the maximum is taken in the
// input's type and converted once (f16 -> f32 exact, f32 -> f16 rounded).
//   contract: reduce_max(input: memref<*xA>, output: memref<*xB>), A, B in {f16, f32}
//   params:   struct { MemRefData input, output; }              64 bytes
// R is found through dimsOrder.  Rows (R dense and long) take the max of 2
// vectors per step into two accumulators, masked tails filled with -inf;
// groups take 8 rows at once, one per lane, stepping along R with its stride
// (see the reduce row block).  A NaN in a row gives what vmax gives.

    .global reduce_max
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 2           # 0 elementwise, 1 softmax, 2 reduction
    .text
reduce_max:                     # entry: the shared driver
    .include "include/driver.inc"
    .include "include/reduce_row.inc"

// ---- reduce_max: setup, rows, groups ----
// setup: f16 or f32 on each side; -inf in f16 (v20) and f32 (v21) lanes
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
    li.f16   s3, -inf
    vbcast.h v20, s3
    li.f32   s3, -inf
    vbcast.w v21, s3
    li       s0, 0
k_setup_end:
    ret

// rows: pairs of vectors (v0 takes the even ones, v1 the odd), then a masked
// pair; the lanes' max in s8 (f32 bits), stored in the output's type
    .macro mx_row ty, m, shift, ninf
k_row_\ty:
    vmov     v0, \ninf
    vmov     v1, \ninf
    srli     s9, s5, \shift + 1      # pairs of vectors
    andi     s10, s5, (2 << \shift) - 1
    beqz     s9, k_row_\ty\()_tail
k_row_\ty\()_pair:
    vld      v2, 0(s2)
    vld      v3, 16(s2)
    addi     s2, s2, 32
    vmax.\ty v0, v0, v2
    vmax.\ty v1, v1, v3
    loop     s9, k_row_\ty\()_pair
k_row_\ty\()_tail:
    vmask.\m m0, s10                # maybe no lanes
    addi     s11, s10, -(1 << \shift)
    li       s12, 0
    max      s11, s11, s12
    vmask.\m m1, s11
    vld.m    v2, 0(s2), m0
    vld.m    v3, 16(s2), m1
    vsel     v2, v2, \ninf, m0
    vsel     v3, v3, \ninf, m1
    vmax.\ty v0, v0, v2
    vmax.\ty v1, v1, v3
    vmax.\ty v0, v0, v1
    vredmax.\ty s8, v0
    j        k_row_store
    .endm

reduce_row:
    li       s8, DT_F32
    beq      s6, s8, k_row_f32
    mx_row   f16, h, 3, v20
    mx_row   f32, w, 2, v21
k_row_store:
    li       s9, DT_F32
    beq      s7, s9, k_row_store32
    fcvt.f16.f32 s8, s8
    sh       s8, 0(s4)
    ret
k_row_store32:
    sw       s8, 0(s4)
    ret

// groups: one step along R at a time; f16 lanes in v0 (one strided load per
// step), f32 lanes 0..3 in v0 and 4..7 in v8 (two); stored widened or narrowed
reduce_group:
    vmask.h  m0, s11                # f16 lanes
    vmask.w  m2, s11                # f32 lanes 0..3
    addi     s12, s11, -4
    li       s13, 0
    max      s12, s12, s13
    vmask.w  m1, s12                # f32 lanes 4..7
    li       s12, DT_F32
    beq      s6, s12, k_g32
    vmov     v0, v20
k_g16_step:
    vlds.m.h v1, 0(s2), s3, m0
    add      s2, s2, s8
    vmax.f16 v0, v0, v1
    loop     s5, k_g16_step
    li       s12, DT_F32
    beq      s7, s12, k_g16_wide
    vsts.m.h v0, 0(s4), s10, m0
    ret
k_g16_wide:
    vcvth.f32.f16 v8, v0
    vcvtl.f32.f16 v0, v0
    j        k_g_store32
k_g32:
    vmov     v0, v21
    vmov     v8, v21
    slli     s12, s3, 2
    add      s12, s2, s12           # lane 4
k_g32_step:
    vlds.m.w v1, 0(s2), s3, m2
    vlds.m.w v2, 0(s12), s3, m1
    add      s2, s2, s8
    add      s12, s12, s8
    vmax.f32 v0, v0, v1
    vmax.f32 v8, v8, v2
    loop     s5, k_g32_step
    li       s12, DT_F32
    beq      s7, s12, k_g_store32
    vcvt.f16.f32 v0, v0, v8
    vsts.m.h v0, 0(s4), s10, m0
    ret
k_g_store32:
    slli     s12, s10, 2
    add      s12, s4, s12
    vsts.m.w v0, 0(s4), s10, m2
    vsts.m.w v8, 0(s12), s10, m1
    ret
