// tanh: output = tanh(input), elementwise.
//   contract: tanh(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// vtanh computes in f32 and rounds once to the lane type, so the f16 path is
// vtanh.f16 directly (8 lanes per instruction).

    .global tanh
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
tanh:                           # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- tanh: setup and compute ----
// setup: every operand f16, or every operand f32
    setup_same_float
k_setup_end:
    ret

// compute: one input, one instruction per vector
    .macro k_op ty, d, b
    vtanh.\ty \d, \d
    .endm
    ew_compute 1, k_op
