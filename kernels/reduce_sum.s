// reduce_sum: the sum over the innermost logical axis R (the last logical dim);
// the output has extent 1 along R.  Accumulates in f32.
//   contract: reduce_sum(input: memref<*xA>, output: memref<*xB>), A, B in {f16, f32}
//   params:   struct { MemRefData input, output; }              64 bytes
// R is found through dimsOrder.  Rows (R dense and long) accumulate 8 lanes per
// step and finish with a pairwise tree; groups accumulate 8 rows at once, one
// per lane, stepping along R with its stride (see the reduce row block).

    .global reduce_sum
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 2           # 0 elementwise, 1 softmax, 2 reduction
    .text
reduce_sum:                     # entry: the shared driver
    .include "include/driver.inc"
    .include "include/reduce_row.inc"

// ---- reduce_sum: setup, rows, groups ----
// setup: f16 or f32 on each side
    setup_float_in_out

    rd_sum_kernel rd_none, rd_none
