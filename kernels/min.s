// min: output = min(a, b), elementwise, with numpy broadcasting of size-1 dims.
//   contract: min(a: memref<*xT>, b: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData a, b, output; }               96 bytes
// a and b have the output's rank (any dim may be 1 and broadcasts), or rank 0:
// a tensor-scalar min passes the scalar as a rank-0 (or all-ones) memref.
// Computed in the tensor's type: correctly rounded, as numpy does it.

    .global min
    .equ NUM_IN, 2              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
min:                            # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- min: setup and compute ----
// setup: every operand f16, or every operand f32
    setup_same_float
k_setup_end:
    ret

// compute: two inputs, one instruction per vector
    .macro k_op ty, d, b
    vmin.\ty \d, \d, \b
    .endm
    ew_compute 2, k_op
