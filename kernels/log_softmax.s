// log_softmax over the innermost logical axis R (the last logical dim),
// numerically stable: y = (x - max) - log(sum(exp(x - max))), in f32, one
// rounding to the type.
//   contract: log_softmax(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// R is found through dimsOrder (strided R goes by groups, see the reduce row
// block).  Three passes over each row or group of 8 rows: the max, the sum of
// exp(x - max) (f32 accumulators), and (x - max) - log(sum) (two
// subtractions: x - c with c = max + log(sum) would lose ulp(c) to cancellation).

    .global log_softmax
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 1           # 0 elementwise, 1 softmax, 2 reduction
    .text
log_softmax:                    # entry: the shared driver
    .include "include/driver.inc"
    .include "include/reduce_row.inc"

// ---- log_softmax: setup, rows, groups ----
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

// per-type steps on one loaded vector A (f16: widened to A = lanes 0..3 and
// B = lanes 4..7; f32: A alone)
    .macro ls_widen_f16 a, b
    vcvth.f32.f16 \b, \a
    vcvtl.f32.f16 \a, \a
    .endm
    .macro ls_widen_f32 a, b
    .endm
    .macro ls_op_f16 op, a, b, c
    \op      \a, \a, \c
    \op      \b, \b, \c
    .endm
    .macro ls_op_f32 op, a, b, c
    \op      \a, \a, \c
    .endm
    .macro ls_exp_f16 a, b
    vexp.f32 \a, \a
    vexp.f32 \b, \b
    .endm
    .macro ls_exp_f32 a, b
    vexp.f32 \a, \a
    .endm
    .macro ls_acc_f16 a, b, c, d
    vadd.f32 \c, \c, \a
    vadd.f32 \d, \d, \b
    .endm
    .macro ls_acc_f32 a, b, c, d
    vadd.f32 \c, \c, \a
    .endm
    .macro ls_narrow_f16 a, b
    vcvt.f16.f32 \a, \a, \b
    .endm
    .macro ls_narrow_f32 a, b
    .endm

// the 4 vectors of a block (v1, v8, v10, v12; f16: widened into v5, v9, v11,
// v13), each step issued for all 4 before the next, so that few instructions
// wait for the one before
    .macro ls_load4
    vld      v1, 0(s12)
    vld      v8, 16(s12)
    vld      v10, 32(s12)
    vld      v12, 48(s12)
    addi     s12, s12, 64
    .endm
    .macro ls_each4 ty, m
    \m\()_\ty v1, v5
    \m\()_\ty v8, v9
    \m\()_\ty v10, v11
    \m\()_\ty v12, v13
    .endm
    .macro ls_op4 ty, op, c
    ls_op_\ty \op, v1, v5, \c
    ls_op_\ty \op, v8, v9, \c
    ls_op_\ty \op, v10, v11, \c
    ls_op_\ty \op, v12, v13, \c
    .endm
    .macro ls_store4
    vst      v1, 0(s4)
    vst      v8, 16(s4)
    vst      v10, 32(s4)
    vst      v12, 48(s4)
    addi     s4, s4, 64
    .endm
// a pass's loops: blocks of 4 vectors (s9 of them), then single vectors (s15),
// then the masked one, loaded into v1; BLOCK and ONE are macros taking TY
    .macro ls_pass ty, name, block, one
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_\name\()_\ty\()_ones
k_\name\()_\ty:
    \block   \ty
    loop     s13, k_\name\()_\ty
k_\name\()_\ty\()_ones:
    mov      s13, s15
    beqz     s13, k_\name\()_\ty\()_tail
k_\name\()_\ty\()_one:
    vld      v1, 0(s12)
    addi     s12, s12, 16
    \one     \ty
    loop     s13, k_\name\()_\ty\()_one
k_\name\()_\ty\()_tail:
    vld.m    v1, 0(s12), m0
    .endm
// the passes' steps on a block (NAME4) and on one vector in v1 (NAME1): the max
// in the type (v0, v6), the sum of exp(x - max) in f32 (v3, v4 and v14, v15),
// the output
    .macro ls_max4_f16
    ls_load4
    vmax.f16 v0, v0, v1
    vmax.f16 v6, v6, v8
    vmax.f16 v0, v0, v10
    vmax.f16 v6, v6, v12
    .endm
    .macro ls_max4_f32
    ls_load4
    vmax.f32 v0, v0, v1
    vmax.f32 v6, v6, v8
    vmax.f32 v0, v0, v10
    vmax.f32 v6, v6, v12
    .endm
    .macro ls_max4 ty
    ls_max4_\ty
    .endm
    .macro ls_max1 ty
    vmax.\ty v0, v0, v1
    .endm
    .macro ls_sum4 ty
    ls_load4
    ls_each4 \ty, ls_widen
    ls_op4   \ty, vsub.f32, v2
    ls_each4 \ty, ls_exp
    ls_acc_\ty v1, v5, v3, v4
    ls_acc_\ty v8, v9, v14, v15
    ls_acc_\ty v10, v11, v3, v4
    ls_acc_\ty v12, v13, v14, v15
    .endm
    .macro ls_sum1 ty
    ls_widen_\ty v1, v5
    ls_op_\ty vsub.f32, v1, v5, v2
    ls_exp_\ty v1, v5
    ls_acc_\ty v1, v5, v3, v4
    .endm
    .macro ls_out4 ty
    ls_load4
    ls_each4 \ty, ls_widen
    ls_op4   \ty, vsub.f32, v2
    ls_op4   \ty, vsub.f32, v7
    ls_each4 \ty, ls_narrow
    ls_store4
    .endm
    .macro ls_out1 ty
    ls_widen_\ty v1, v5
    ls_op_\ty vsub.f32, v1, v5, v2
    ls_op_\ty vsub.f32, v1, v5, v7
    ls_narrow_\ty v1, v5
    vst      v1, 0(s4)
    addi     s4, s4, 16
    .endm

// reduce_row: one dense row of n elements (s2 in, s4 out); the masked last
// vector is filled with -inf (whose exp adds 0)
    .macro ls_row ty, m, shift, ninf
k_row_\ty:
    srli     s9, s5, \shift + 2    # blocks of 4 vectors
    srli     s15, s5, \shift
    andi     s15, s15, 3           # then whole vectors
    andi     s10, s5, (1 << \shift) - 1
    vmask.\m m0, s10               # then a masked one (maybe no lanes)
    # pass 1: the row max, in the type (exact)
    vmov     v0, \ninf
    vmov     v6, \ninf
    ls_pass  \ty, max, ls_max4, ls_max1
    vsel     v1, v1, \ninf, m0
    vmax.\ty v0, v0, v1
    vmax.\ty v0, v0, v6
    vredmax.\ty s14, v0
    vbcast.w v2, s14            # max, f32 lanes
    # pass 2: the sum of exp(x - max), in f32
    .irp     r, v3, v4, v14, v15
    vxor     \r, \r, \r
    .endr
    ls_pass  \ty, sum, ls_sum4, ls_sum1
    vsel     v1, v1, \ninf, m0
    ls_sum1  \ty
    vadd.f32 v3, v3, v14
    vadd.f32 v4, v4, v15
    vadd.f32 v3, v3, v4
    vredsum.f32 s14, v3
    vbcast.w v7, s14
    vlog.f32 v7, v7            # log(sum)
    # pass 3: (x - max) - log(sum), rounded once to the type
    ls_pass  \ty, out, ls_out4, ls_out1
    ls_widen_\ty v1, v5
    ls_op_\ty vsub.f32, v1, v5, v2
    ls_op_\ty vsub.f32, v1, v5, v7
    ls_narrow_\ty v1, v5
    vst.m    v1, 0(s4), m0
    ret
    .endm

reduce_row:
    li       s8, DT_F32
    beq      s6, s8, k_row_f32
    ls_row   f16, h, 3, v20
    ls_row   f32, w, 2, v21

// reduce_group: 8 rows at once (one per lane, s11 active), the same three
// passes one step along R at a time; lanes 0..3 in A, 4..7 in B (f16: one
// strided load widened; f32: two strided loads, lane 4 at s15)
    .macro lg_load_f16 a, b
    vlds.m.h \a, 0(s12), s3, m0
    add      s12, s12, s8
    vcvth.f32.f16 \b, \a
    vcvtl.f32.f16 \a, \a
    .endm
    .macro lg_load_f32 a, b
    vlds.m.w \a, 0(s12), s3, m2
    vlds.m.w \b, 0(s15), s3, m1
    add      s12, s12, s8
    add      s15, s15, s8
    .endm
    .macro lg_store_f16 a, b
    vcvt.f16.f32 \a, \a, \b
    vsts.m.h \a, 0(s14), s10, m0
    add      s14, s14, s9
    .endm
    .macro lg_store_f32 a, b
    vsts.m.w \a, 0(s14), s10, m2
    vsts.m.w \b, 0(s7), s10, m1
    add      s14, s14, s9
    add      s7, s7, s9
    .endm
    .macro lg_start
    mov      s12, s2
    slli     s15, s3, 2
    add      s15, s2, s15
    mov      s13, s5
    .endm
    .macro lg_group ty
k_g_\ty:
    # pass 1: the max of each lane, in f32
    vmov     v0, v21
    vmov     v8, v21
    lg_start
k_gmax_\ty:
    lg_load_\ty v1, v2
    vmax.f32 v0, v0, v1
    vmax.f32 v8, v8, v2
    loop     s13, k_gmax_\ty
    # pass 2: the sum of exp(x - max) of each lane
    vxor     v4, v4, v4
    vxor     v9, v9, v9
    lg_start
k_gsum_\ty:
    lg_load_\ty v1, v2
    vsub.f32 v1, v1, v0
    vsub.f32 v2, v2, v8
    vexp.f32 v1, v1
    vexp.f32 v2, v2
    vadd.f32 v4, v4, v1
    vadd.f32 v9, v9, v2
    loop     s13, k_gsum_\ty
    vlog.f32 v4, v4
    vlog.f32 v9, v9
    # pass 3: (x - max) - log(sum)
    lg_start
    mov      s14, s4
    slli     s7, s10, 2
    add      s7, s4, s7
k_gout_\ty:
    lg_load_\ty v1, v2
    vsub.f32 v1, v1, v0
    vsub.f32 v2, v2, v8
    vsub.f32 v1, v1, v4
    vsub.f32 v2, v2, v9
    lg_store_\ty v1, v2
    loop     s13, k_gout_\ty
    ret
    .endm

reduce_group:
    vmask.h  m0, s11                # f16 lanes
    vmask.w  m2, s11                # f32 lanes 0..3
    addi     s12, s11, -4
    li       s13, 0
    max      s12, s12, s13
    vmask.w  m1, s12                # f32 lanes 4..7
    li       s12, DT_F32
    beq      s6, s12, k_g_f32
    lg_group f16
    lg_group f32
