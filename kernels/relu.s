// relu: output = max(input, 0), elementwise.
//   contract: relu(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// Computed in the tensor's type (max is exact).  Any rank, layout, strides;
// input dims may broadcast (size 1) against the output's.

    .global relu
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
relu:                           # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- relu: setup and compute ----
// setup: every operand f16, or every operand f32
    setup_same_float
    vxor     v16, v16, v16          # 0.0, f16 and f32 alike
k_setup_end:
    ret

// compute: one input, one instruction per vector
    .macro k_op ty, d, b
    vmax.\ty \d, \d, v16         # v16 = 0.0
    .endm
    ew_compute 1, k_op
