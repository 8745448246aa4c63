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

// reduce_row: one dense row of n elements (s2 in, s4 out), for f16 or f32 --
// one macro, sm_row, with per-type steps: an f16 vector is widened to two f32
// vectors and rounded back, an f32 vector is used as it is.  Three passes,
// each over blocks of 4 vectors, then a pair, then a masked pair: the max
// (in the type: v0 takes the even vectors, v8 the odd), the sum of
// exp(x - max) in f32 (f16: v3, v4 take the low and high halves of the even
// vectors, v12, v13 of the odd; f32: v3 the even vectors, v12 the odd), and
// exp(x - max) * (1 / sum), rounded once.  Passes 2 and 3 are
// software-pipelined: iteration i loads, widens and exponentiates block i and
// finishes block i-1 (the sum's additions keep their order).  In a block the
// steps of the 4 vectors run as a wavefront (step s of vector k in wave s + k,
// earlier steps first), so that few instructions wait for the one before.
    .macro sm_row ty, m, shift, ninf
k_row_\ty:
    srli     s9, s5, \shift + 2      # blocks of 4 vectors
    srli     s10, s5, \shift + 1
    andi     s10, s10, 1           # then a pair of vectors (0 or 1)
    andi     s11, s5, (2 << \shift) - 1   # then a masked pair (maybe no lanes)
    vmask.\m m0, s11
    addi     s12, s11, -(1 << \shift)
    li       s13, 0
    max      s12, s12, s13
    vmask.\m m1, s12
    # pass 1: the row max (exact in either type)
    vmov     v0, \ninf
    vmov     v8, \ninf
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_max_\ty\()_rest
k_max_\ty:
    vld      v1, 0(s12)
    vld      v5, 16(s12)
    vld      v9, 32(s12)
    vld      v14, 48(s12)
    addi     s12, s12, 64
    vmax.\ty v0, v0, v1
    vmax.\ty v8, v8, v5
    vmax.\ty v0, v0, v9
    vmax.\ty v8, v8, v14
    loop     s13, k_max_\ty
k_max_\ty\()_rest:
    beqz     s10, k_max_\ty\()_tail
    vld      v1, 0(s12)
    vld      v5, 16(s12)
    addi     s12, s12, 32
    vmax.\ty v0, v0, v1
    vmax.\ty v8, v8, v5
k_max_\ty\()_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v5, 16(s12), m1
    vsel     v1, v1, \ninf, m0
    vsel     v5, v5, \ninf, m1
    vmax.\ty v0, v0, v1
    vmax.\ty v8, v8, v5
    vmax.\ty v0, v0, v8
    vredmax.\ty s14, v0
    vbcast.w v2, s14            # max, f32 lanes
    # pass 2: the sum of exp(x - max), in f32
    .irp     r, v3, v4, v12, v13
    vxor     \r, \r, \r
    .endr
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_sum_\ty\()_rest
    sm_exp_block \ty
    addi     s12, s12, 64
    addi     s13, s13, -1
    beqz     s13, k_sum_\ty\()_last
k_sum_\ty:
    sm_acc_pair \ty
    vld      v1, 0(s12)
    sm_acc_\ty v9, v11, v3, v4
    vld      v5, 16(s12)
    sm_widen_\ty v1, v6
    sm_acc_\ty v14, v15, v12, v13
    sm_exp_next \ty
    loop     s13, k_sum_\ty
k_sum_\ty\()_last:
    sm_acc_pair \ty
    sm_acc_\ty v9, v11, v3, v4
    sm_acc_\ty v14, v15, v12, v13
k_sum_\ty\()_rest:
    beqz     s10, k_sum_\ty\()_tail
    sm_load_pair
    sm_exp_pair \ty
    sm_acc_pair \ty
k_sum_\ty\()_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v5, 16(s12), m1
    vsel     v1, v1, \ninf, m0
    vsel     v5, v5, \ninf, m1
    sm_exp_pair \ty
    sm_acc_pair \ty
    sm_total_\ty
    vredsum.f32 s14, v3
    vbcast.w v7, s14
    vrcp.f32 v7, v7            # 1 / sum
    # pass 3: exp(x - max) / sum, rounded once to the type
    mov      s12, s2
    mov      s13, s9
    beqz     s13, k_out_\ty\()_rest
    sm_exp_block \ty
    addi     s12, s12, 64
    addi     s13, s13, -1
    beqz     s13, k_out_\ty\()_last
k_out_\ty:
    sm_scale_head \ty
    vld      v1, 0(s12)
    sm_narrow_\ty v14, v15
    vst      v9, 32(s4)
    vld      v5, 16(s12)
    sm_widen_\ty v1, v6
    vst      v14, 48(s4)
    sm_exp_next \ty
    addi     s4, s4, 64
    loop     s13, k_out_\ty
k_out_\ty\()_last:
    sm_scale_head \ty
    sm_narrow_\ty v14, v15
    vst      v9, 32(s4)
    vst      v14, 48(s4)
    addi     s4, s4, 64
k_out_\ty\()_rest:
    beqz     s10, k_out_\ty\()_tail
    sm_load_pair
    sm_exp_pair \ty
    sm_scale_pair \ty
    vst      v1, 0(s4)
    vst      v5, 16(s4)
    addi     s4, s4, 32
k_out_\ty\()_tail:
    vld.m    v1, 0(s12), m0
    vld.m    v5, 16(s12), m1
    sm_exp_pair \ty
    sm_scale_pair \ty
    vst.m    v1, 0(s4), m0
    vst.m    v5, 16(s4), m1
    ret
    .endm

// the per-type steps of sm_row on one loaded vector A (f16: widened to A, B;
// f32: A alone, B unused), accumulating into C (and D)
    .macro sm_widen_f16 a, b
    vcvth.f32.f16 \b, \a
    vcvtl.f32.f16 \a, \a
    .endm
    .macro sm_widen_f32 a, b
    .endm
    .macro sm_op_f16 op, a, b, c
    \op      \a, \a, \c
    \op      \b, \b, \c
    .endm
    .macro sm_op_f32 op, a, b, c
    \op      \a, \a, \c
    .endm
    .macro sm_exp_f16 a, b
    vexp.f32 \a, \a
    vexp.f32 \b, \b
    .endm
    .macro sm_exp_f32 a, b
    vexp.f32 \a, \a
    .endm
    .macro sm_acc_f16 a, b, c, d
    vadd.f32 \c, \c, \a
    vadd.f32 \d, \d, \b
    .endm
    .macro sm_acc_f32 a, b, c, d
    vadd.f32 \c, \c, \a
    .endm
    .macro sm_narrow_f16 a, b
    vcvt.f16.f32 \a, \a, \b
    .endm
    .macro sm_narrow_f32 a, b
    .endm
// the accumulators' total into v3: f16 (v3 + v4) + (v12 + v13), f32 v3 + v12
    .macro sm_total_f16
    vadd.f32 v3, v3, v4
    vadd.f32 v12, v12, v13
    vadd.f32 v3, v3, v12
    .endm
    .macro sm_total_f32
    vadd.f32 v3, v3, v12
    .endm

// the wavefronts of sm_row, by type TY.  A block of 4 vectors (v1, v5, v9, v14;
// f16: widened into v6, v10, v11, v15): sm_exp_block loads it and computes
// exp(x - max); sm_exp_next is its second half, after the loads of v1 and v5
// (the loops interleave those with the previous block's finish), bumping s12;
// sm_exp_last is the last waves of both.  sm_scale_head: the first waves of a
// block's scale and store (all but v14's rounding and v9's, v14's stores).
    .macro sm_exp_block ty
    vld      v1, 0(s12)
    vld      v5, 16(s12)
    sm_widen_\ty v1, v6
    vld      v9, 32(s12)
    sm_widen_\ty v5, v10
    sm_op_\ty vsub.f32, v1, v6, v2
    vld      v14, 48(s12)
    sm_exp_last \ty
    .endm
    .macro sm_exp_next ty
    vld      v9, 32(s12)
    sm_widen_\ty v5, v10
    sm_op_\ty vsub.f32, v1, v6, v2
    vld      v14, 48(s12)
    addi     s12, s12, 64
    sm_exp_last \ty
    .endm
    .macro sm_exp_last ty
    sm_widen_\ty v9, v11
    sm_op_\ty vsub.f32, v5, v10, v2
    sm_exp_\ty v1, v6
    sm_widen_\ty v14, v15
    sm_op_\ty vsub.f32, v9, v11, v2
    sm_exp_\ty v5, v10
    sm_op_\ty vsub.f32, v14, v15, v2
    sm_exp_\ty v9, v11
    sm_exp_\ty v14, v15
    .endm
    .macro sm_scale_head ty
    sm_op_\ty vmul.f32, v1, v6, v7
    sm_op_\ty vmul.f32, v5, v10, v7
    sm_narrow_\ty v1, v6
    sm_op_\ty vmul.f32, v9, v11, v7
    sm_narrow_\ty v5, v10
    vst      v1, 0(s4)
    sm_op_\ty vmul.f32, v14, v15, v7
    sm_narrow_\ty v9, v11
    vst      v5, 16(s4)
    .endm
// a pair of vectors (v1, v5; f16: and v6, v10): loaded (bumping s12),
// exp(x - max), added to the sums, scaled by 1 / sum and rounded
    .macro sm_load_pair
    vld      v1, 0(s12)
    vld      v5, 16(s12)
    addi     s12, s12, 32
    .endm
    .macro sm_exp_pair ty
    sm_widen_\ty v1, v6
    sm_widen_\ty v5, v10
    sm_op_\ty vsub.f32, v1, v6, v2
    sm_op_\ty vsub.f32, v5, v10, v2
    sm_exp_\ty v1, v6
    sm_exp_\ty v5, v10
    .endm
    .macro sm_acc_pair ty
    sm_acc_\ty v1, v6, v3, v4
    sm_acc_\ty v5, v10, v12, v13
    .endm
    .macro sm_scale_pair ty
    sm_op_\ty vmul.f32, v1, v6, v7
    sm_op_\ty vmul.f32, v5, v10, v7
    sm_narrow_\ty v1, v6
    sm_narrow_\ty v5, v10
    .endm

reduce_row:
    li       s8, DT_F32
    beq      s6, s8, k_row_f32
    sm_row   f16, h, 3, v20
    sm_row   f32, w, 2, v21

// reduce_group: 8 rows at once (one per lane, s11 of them active), for f16 or
// f32 -- one macro, sg_group, with per-type loads and stores: an f16 step is
// one strided load widened to two f32 vectors (lanes 0..3 and 4..7), an f32
// step two strided loads.  Three passes along R, each over blocks of 4 steps
// then one step at a time: the max of each lane (v0, v8), the sum of
// exp(x - max) (v4, v9), and exp(x - max) * (1 / sum), rounded once.  The
// blocks of the first two passes are software-pipelined: iteration i loads
// (and widens, and exponentiates) block i and finishes block i-1; the third
// pass's blocks are not (its strided stores step their pointer between them,
// which the fast path's pipelined batches cannot take).  In a block the steps
// run as a wavefront (as in reduce_row); each lane's max and sum keep their
// order along R.
    .macro sg_group ty
k_g_\ty:
    sg_setup_\ty
    # pass 1: the max of each lane, in f32
    vmov     v0, v21
    vmov     v8, v21
    sg_start_\ty
    srli     s13, s5, 2           # blocks of 4 steps along R
    beqz     s13, k_gmax_\ty\()_rest
    sg_load_block \ty
    sg_load_\ty v10, v11
    sg_widen_\ty v6, v7
    sg_widen_\ty v10, v11
    addi     s13, s13, -1
    beqz     s13, k_gmax_\ty\()_last
k_gmax_\ty:
    sg_fold_next \ty, sg_max
    sg_load_\ty v10, v11
    sg_widen_\ty v6, v7
    sg_widen_\ty v10, v11
    loop     s13, k_gmax_\ty
k_gmax_\ty\()_last:
    sg_fold  sg_max
k_gmax_\ty\()_rest:
    andi     s13, s5, 3           # steps after them
    beqz     s13, k_gmax_\ty\()_done
k_gmax_\ty\()_one:
    sg_load_\ty v1, v2
    sg_widen_\ty v1, v2
    sg_max   v1, v2
    loop     s13, k_gmax_\ty\()_one
k_gmax_\ty\()_done:
    # pass 2: the sum of exp(x - max) of each lane
    vxor     v4, v4, v4
    vxor     v9, v9, v9
    sg_start_\ty
    srli     s13, s5, 2           # blocks of 4 steps along R
    beqz     s13, k_gsum_\ty\()_rest
    sg_load_block \ty
    sg_exp_mid \ty
    sg_exp_end
    addi     s13, s13, -1
    beqz     s13, k_gsum_\ty\()_last
k_gsum_\ty:
    sg_fold_next \ty, sg_add
    sg_exp_mid \ty
    sg_exp_end
    loop     s13, k_gsum_\ty
k_gsum_\ty\()_last:
    sg_fold  sg_add
k_gsum_\ty\()_rest:
    andi     s13, s5, 3           # steps after them
    beqz     s13, k_gsum_\ty\()_done
k_gsum_\ty\()_one:
    sg_exp_one \ty
    sg_add   v1, v2
    loop     s13, k_gsum_\ty\()_one
k_gsum_\ty\()_done:
    vrcp.f32 v4, v4
    vrcp.f32 v9, v9
    # pass 3: exp(x - max) / sum, rounded once to the type
    sg_start_\ty
    sg_out_start_\ty
    srli     s13, s5, 2           # blocks of 4 steps along R
    beqz     s13, k_gout_\ty\()_rest
k_gout_\ty:
    sg_load_block \ty
    sg_exp_mid \ty
    sg_mul   v1, v2
    sg_sub   v10, v11
    sg_exp   v6, v7
    sg_mul   v3, v5
    sg_narrow_\ty v1, v2
    sg_exp   v10, v11
    sg_mul   v6, v7
    sg_narrow_\ty v3, v5
    sg_store_\ty v1, v2
    sg_mul   v10, v11
    sg_narrow_\ty v6, v7
    sg_store_\ty v3, v5
    sg_narrow_\ty v10, v11
    sg_store_\ty v6, v7
    sg_store_\ty v10, v11
    loop     s13, k_gout_\ty
k_gout_\ty\()_rest:
    andi     s13, s5, 3           # steps after them
    beqz     s13, k_gout_\ty\()_done
k_gout_\ty\()_one:
    sg_exp_one \ty
    sg_mul   v1, v2
    sg_narrow_\ty v1, v2
    sg_store_\ty v1, v2
    loop     s13, k_gout_\ty\()_one
k_gout_\ty\()_done:
    ret
    .endm

// the wavefronts of sg_group, by type TY, on the steps of a block (lanes 0..3
// and 4..7 in v1, v2; v3, v5; v6, v7; v10, v11).  sg_load_block: the first
// loads and widenings; sg_exp_mid and sg_exp_end: the rest of the loads and
// exp(x - max) (sg_exp_end: its last waves); sg_fold_next OP: OP (sg_max,
// sg_add) on the previous block interleaved with sg_load_block; sg_fold OP: OP
// on the block; sg_exp_one: one step loaded and exponentiated
    .macro sg_load_block ty
    sg_load_\ty v1, v2
    sg_load_\ty v3, v5
    sg_widen_\ty v1, v2
    sg_load_\ty v6, v7
    sg_widen_\ty v3, v5
    .endm
    .macro sg_exp_mid ty
    sg_sub   v1, v2
    sg_load_\ty v10, v11
    sg_widen_\ty v6, v7
    sg_sub   v3, v5
    sg_exp   v1, v2
    sg_widen_\ty v10, v11
    sg_sub   v6, v7
    sg_exp   v3, v5
    .endm
    .macro sg_exp_end
    sg_sub   v10, v11
    sg_exp   v6, v7
    sg_exp   v10, v11
    .endm
    .macro sg_fold_next ty, op
    \op      v1, v2
    \op      v3, v5
    sg_load_\ty v1, v2
    \op      v6, v7
    sg_load_\ty v3, v5
    sg_widen_\ty v1, v2
    \op      v10, v11
    sg_load_\ty v6, v7
    sg_widen_\ty v3, v5
    .endm
    .macro sg_fold op
    \op      v1, v2
    \op      v3, v5
    \op      v6, v7
    \op      v10, v11
    .endm
    .macro sg_exp_one ty
    sg_load_\ty v1, v2
    sg_widen_\ty v1, v2
    sg_sub   v1, v2
    sg_exp   v1, v2
    .endm
// one f32 operation on a step's lanes A (0..3), B (4..7): into the max (v0,
// v8) or the sum (v4, v9); x - max; exp; times 1 / sum (v4, v9)
    .macro sg_max a, b
    vmax.f32 v0, v0, \a
    vmax.f32 v8, v8, \b
    .endm
    .macro sg_add a, b
    vadd.f32 v4, v4, \a
    vadd.f32 v9, v9, \b
    .endm
    .macro sg_sub a, b
    vsub.f32 \a, \a, v0
    vsub.f32 \b, \b, v8
    .endm
    .macro sg_exp a, b
    vexp.f32 \a, \a
    vexp.f32 \b, \b
    .endm
    .macro sg_mul a, b
    vmul.f32 \a, \a, v4
    vmul.f32 \b, \b, v9
    .endm

// the per-type steps of sg_group: masks and pointers, one step's load (the 8
// lanes into two f32 vectors A, B: f16 one strided load widened, f32 two) and
// store (f16 rounded into one strided store, f32 two)
    .macro sg_setup_f16
    vmask.h  m0, s11            # active lanes
    .endm
    .macro sg_setup_f32
    vmask.w  m0, s11            # active lanes 0..3
    addi     s12, s11, -4
    li       s13, 0
    max      s12, s12, s13
    vmask.w  m1, s12            # and 4..7
    slli     s6, s3, 2            # lane 4, from lane 0
    slli     s7, s10, 2
    .endm
    .macro sg_start_f16
    mov      s12, s2
    .endm
    .macro sg_start_f32
    mov      s12, s2
    add      s15, s2, s6
    .endm
    .macro sg_out_start_f16
    mov      s14, s4
    .endm
    .macro sg_out_start_f32
    mov      s14, s4
    add      s7, s4, s7
    .endm
    .macro sg_load_f16 a, b
    vlds.m.h \a, 0(s12), s3, m0
    add      s12, s12, s8
    .endm
    .macro sg_load_f32 a, b
    vlds.m.w \a, 0(s12), s3, m0
    vlds.m.w \b, 0(s15), s3, m1
    add      s12, s12, s8
    add      s15, s15, s8
    .endm
    .macro sg_widen_f16 a, b
    vcvth.f32.f16 \b, \a
    vcvtl.f32.f16 \a, \a
    .endm
    .macro sg_widen_f32 a, b
    .endm
    .macro sg_narrow_f16 a, b
    vcvt.f16.f32 \a, \a, \b
    .endm
    .macro sg_narrow_f32 a, b
    .endm
    .macro sg_store_f16 a, b
    vsts.m.h \a, 0(s14), s10, m0
    add      s14, s14, s9
    .endm
    .macro sg_store_f32 a, b
    vsts.m.w \a, 0(s14), s10, m0
    vsts.m.w \b, 0(s7), s10, m1
    add      s14, s14, s9
    add      s7, s7, s9
    .endm

reduce_group:
    li       s12, DT_F32
    beq      s6, s12, k_g_f32
    sg_group f16
    sg_group f32
