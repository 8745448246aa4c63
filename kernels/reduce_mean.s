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
    setup_float_in_out

// the mean: the totals divided by n, correctly rounded in f32
    .macro k_row_mean
    fcvt.f32.u32 s9, s15
    fdiv     s8, s8, s9           # mean = sum / n
    .endm
    .macro k_group_mean
    fcvt.f32.u32 s12, s15
    vbcast.w v1, s12
    vdiv.f32 v0, v0, v1       # mean = sum / n
    vdiv.f32 v8, v8, v1
    .endm
    rd_sum_kernel k_row_mean, k_group_mean
