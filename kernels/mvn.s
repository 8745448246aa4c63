// mvn: mean-variance normalization over the innermost logical axis R (the last
// logical dim): y = (x - mean) / sqrt(var + eps)  (eps_outside = 0) or
// y = (x - mean) / (sqrt(var) + eps)  (eps_outside != 0), var the biased
// variance.  Two-pass (mean, then sum of (x - mean)^2), all in f32, one
// rounding to the type; the scale is a correctly rounded sqrt and division.
//   contract: mvn(input: memref<*xT>, output: memref<*xT>, eps: f32, eps_outside: i32)
//             T = f16 or f32
//   params:   struct { MemRefData input, output; f32 eps; i32 eps_outside; } 72 bytes
// LayerNormalization (without its scale and shift) is mvn over the last axis;
// InstanceNormalization over H x W viewed as one dim.  Rows or groups of 8
// rows (R strided), as the other reductions (see the reduce row block).

    .global mvn
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 1           # 0 elementwise, 1 softmax, 2 reduction
    .equ SCALARS, 64            # eps, eps_outside: after the two MemRefData
    .text
mvn:                            # entry: the shared driver
    .include "include/driver.inc"
    .include "include/reduce_row.inc"

// ---- mvn: setup, rows, groups ----
// setup: the same float type in and out; v22 = eps under the sqrt (or 0),
// v23 = eps after it (or 0), v24 = 1.0, v25 = 0 (f32 lanes)
    setup_same_float
    lw       s3, SCALARS(s17)         # eps
    lw       s4, SCALARS + 4(s17)     # eps_outside
    vxor     v25, v25, v25
    vbcast.w v22, s3
    vmov     v23, v25
    beqz     s4, k_setup_one
    vmov     v23, v22
    vmov     v22, v25
k_setup_one:
    li.f32   s3, 1.0
    vbcast.w v24, s3
k_setup_end:
    ret

// the scale from the sums of squares in VAR (f32 lanes) and n (f32 lanes, VN):
// VAR = 1 / (sqrt(VAR / n + eps_in) + eps_out)
    .macro mv_scale var, vn
    vdiv.f32 \var, \var, \vn
    vadd.f32 \var, \var, v22
    vsqrt.f32 \var, \var
    vadd.f32 \var, \var, v23
    vdiv.f32 \var, v24, \var
    .endm

// per-type steps on one loaded vector A (f16: widened to A = lanes 0..3 and
// B = lanes 4..7; f32: A alone)
    .macro mv_widen_f16 a, b
    vcvth.f32.f16 \b, \a
    vcvtl.f32.f16 \a, \a
    .endm
    .macro mv_widen_f32 a, b
    .endm
    .macro mv_op_f16 op, a, b, c
    \op      \a, \a, \c
    \op      \b, \b, \c
    .endm
    .macro mv_op_f32 op, a, b, c
    \op      \a, \a, \c
    .endm
    .macro mv_sq_f16 a, b
    vmul.f32 \a, \a, \a
    vmul.f32 \b, \b, \b
    .endm
    .macro mv_sq_f32 a, b
    vmul.f32 \a, \a, \a
    .endm
    .macro mv_acc_f16 a, b, c, d
    vadd.f32 \c, \c, \a
    vadd.f32 \d, \d, \b
    .endm
    .macro mv_acc_f32 a, b, c, d
    vadd.f32 \c, \c, \a
    .endm
    .macro mv_narrow_f16 a, b
    vcvt.f16.f32 \a, \a, \b
    .endm
    .macro mv_narrow_f32 a, b
    .endm
// the tail's f32 lane masks from s10 valid elements: f16 m1 (lanes 0..3),
// m2 (4..7); f32 m1 = m0
    .macro mv_tailmask_f16
    li       s11, 4
    minu     s11, s11, s10
    vmask.w  m1, s11
    addi     s11, s10, -4
    li       s12, 0
    max      s11, s11, s12
    vmask.w  m2, s11
    .endm
    .macro mv_tailmask_f32
    vmask.w  m1, s10
    .endm
    .macro mv_tailzero_f16 a, b
    vsel     \a, \a, v25, m1
    vsel     \b, \b, v25, m2
    .endm
    .macro mv_tailzero_f32 a, b
    vsel     \a, \a, v25, m1
    .endm

// the 4 vectors of a block (v1, v8, v10, v12; f16: widened into v5, v9, v11,
// v13), each step issued for all 4 before the next, so that few instructions
// wait for the one before
    .macro mv_load4
    vld      v1, 0(s12)
    vld      v8, 16(s12)
    vld      v10, 32(s12)
    vld      v12, 48(s12)
    addi     s12, s12, 64
    .endm
    .macro mv_each4 ty, m
    \m\()_\ty v1, v5
    \m\()_\ty v8, v9
    \m\()_\ty v10, v11
    \m\()_\ty v12, v13
    .endm
    .macro mv_op4 ty, op, c
    mv_op_\ty \op, v1, v5, \c
    mv_op_\ty \op, v8, v9, \c
    mv_op_\ty \op, v10, v11, \c
    mv_op_\ty \op, v12, v13, \c
    .endm
    .macro mv_acc4 ty
    mv_acc_\ty v1, v5, v3, v4
    mv_acc_\ty v8, v9, v14, v15
    mv_acc_\ty v10, v11, v3, v4
    mv_acc_\ty v12, v13, v14, v15
    .endm
    .macro mv_store4
    vst      v1, 0(s4)
    vst      v8, 16(s4)
    vst      v10, 32(s4)
    vst      v12, 48(s4)
    addi     s4, s4, 64
    .endm
// a pass's loops: blocks of 4 vectors (s9 of them), then single vectors (s15),
// then the masked one; BLOCK and ONE are macros taking TY
    .macro mv_pass ty, name, block, one
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
// the passes' steps on a block (NAME4) and on one vector in v1 (NAME1)
    .macro mv_mean4 ty
    mv_load4
    mv_each4 \ty, mv_widen
    mv_acc4  \ty
    .endm
    .macro mv_mean1 ty
    mv_widen_\ty v1, v5
    mv_acc_\ty v1, v5, v3, v4
    .endm
    .macro mv_var4 ty
    mv_load4
    mv_each4 \ty, mv_widen
    mv_op4   \ty, vsub.f32, v2
    mv_each4 \ty, mv_sq
    mv_acc4  \ty
    .endm
    .macro mv_var1 ty
    mv_widen_\ty v1, v5
    mv_op_\ty vsub.f32, v1, v5, v2
    mv_sq_\ty v1, v5
    mv_acc_\ty v1, v5, v3, v4
    .endm
    .macro mv_out4 ty
    mv_load4
    mv_each4 \ty, mv_widen
    mv_op4   \ty, vsub.f32, v2
    mv_op4   \ty, vmul.f32, v7
    mv_each4 \ty, mv_narrow
    mv_store4
    .endm
    .macro mv_out1 ty
    mv_widen_\ty v1, v5
    mv_op_\ty vsub.f32, v1, v5, v2
    mv_op_\ty vmul.f32, v1, v5, v7
    mv_narrow_\ty v1, v5
    vst      v1, 0(s4)
    addi     s4, s4, 16
    .endm
// the sums' accumulators to zero; their total into s14
    .macro mv_zero
    .irp     r, v3, v4, v14, v15
    vxor     \r, \r, \r
    .endr
    .endm
    .macro mv_total
    vadd.f32 v3, v3, v14
    vadd.f32 v4, v4, v15
    vadd.f32 v3, v3, v4
    vredsum.f32 s14, v3
    .endm

// reduce_row: one dense row of n elements (s2 in, s4 out); the masked last
// vector's lanes beyond n load as 0, and their squared deviations are zeroed
    .macro mv_row ty, m, shift
k_row_\ty:
    srli     s9, s5, \shift + 2    # blocks of 4 vectors
    srli     s15, s5, \shift
    andi     s15, s15, 3           # then whole vectors
    andi     s10, s5, (1 << \shift) - 1
    vmask.\m m0, s10               # then a masked one (maybe no lanes)
    mv_tailmask_\ty
    fcvt.f32.u32 s14, s5
    vbcast.w v6, s14               # n
    # pass 1: the mean
    mv_zero
    mv_pass  \ty, mean, mv_mean4, mv_mean1
    mv_mean1 \ty
    mv_total
    vbcast.w v2, s14
    vdiv.f32 v2, v2, v6            # mean
    # pass 2: the sum of (x - mean)^2
    mv_zero
    mv_pass  \ty, var, mv_var4, mv_var1
    mv_widen_\ty v1, v5
    mv_op_\ty vsub.f32, v1, v5, v2
    mv_sq_\ty v1, v5
    mv_tailzero_\ty v1, v5
    mv_acc_\ty v1, v5, v3, v4
    mv_total
    vbcast.w v7, s14
    mv_scale v7, v6
    # pass 3: (x - mean) * scale, rounded once to the type
    mv_pass  \ty, out, mv_out4, mv_out1
    mv_widen_\ty v1, v5
    mv_op_\ty vsub.f32, v1, v5, v2
    mv_op_\ty vmul.f32, v1, v5, v7
    mv_narrow_\ty v1, v5
    vst.m    v1, 0(s4), m0
    ret
    .endm

reduce_row:
    li       s8, DT_F32
    beq      s6, s8, k_row_f32
    mv_row   f16, h, 3
    mv_row   f32, w, 2

// reduce_group: 8 rows at once (one per lane, s11 active), the same three
// passes one step along R at a time; lanes 0..3 in A, 4..7 in B (f16: one
// strided load widened; f32: two strided loads, lane 4 at s15)
    .macro mg_load_f16 a, b
    vlds.m.h \a, 0(s12), s3, m0
    add      s12, s12, s8
    vcvth.f32.f16 \b, \a
    vcvtl.f32.f16 \a, \a
    .endm
    .macro mg_load_f32 a, b
    vlds.m.w \a, 0(s12), s3, m2
    vlds.m.w \b, 0(s15), s3, m1
    add      s12, s12, s8
    add      s15, s15, s8
    .endm
    .macro mg_store_f16 a, b
    vcvt.f16.f32 \a, \a, \b
    vsts.m.h \a, 0(s14), s10, m0
    add      s14, s14, s9
    .endm
    .macro mg_store_f32 a, b
    vsts.m.w \a, 0(s14), s10, m2
    vsts.m.w \b, 0(s7), s10, m1
    add      s14, s14, s9
    add      s7, s7, s9
    .endm
    .macro mg_start
    mov      s12, s2
    slli     s15, s3, 2
    add      s15, s2, s15
    mov      s13, s5
    .endm
    .macro mg_group ty
k_g_\ty:
    fcvt.f32.u32 s14, s5
    vbcast.w v6, s14               # n
    # pass 1: the mean of each lane
    vxor     v0, v0, v0
    vxor     v8, v8, v8
    mg_start
k_gmean_\ty:
    mg_load_\ty v1, v2
    vadd.f32 v0, v0, v1
    vadd.f32 v8, v8, v2
    loop     s13, k_gmean_\ty
    vdiv.f32 v0, v0, v6
    vdiv.f32 v8, v8, v6
    # pass 2: the sum of (x - mean)^2 of each lane
    vxor     v4, v4, v4
    vxor     v9, v9, v9
    mg_start
k_gvar_\ty:
    mg_load_\ty v1, v2
    vsub.f32 v1, v1, v0
    vsub.f32 v2, v2, v8
    vmul.f32 v1, v1, v1
    vmul.f32 v2, v2, v2
    vadd.f32 v4, v4, v1
    vadd.f32 v9, v9, v2
    loop     s13, k_gvar_\ty
    mv_scale v4, v6
    mv_scale v9, v6
    # pass 3: (x - mean) * scale
    mg_start
    mov      s14, s4
    slli     s7, s10, 2
    add      s7, s4, s7
k_gout_\ty:
    mg_load_\ty v1, v2
    vsub.f32 v1, v1, v0
    vsub.f32 v2, v2, v8
    vmul.f32 v1, v1, v4
    vmul.f32 v2, v2, v9
    mg_store_\ty v1, v2
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
    mg_group f16
    mg_group f32
