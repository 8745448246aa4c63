// swish: output = input * sigmoid(input) = x / (1 + exp(-x)), elementwise.
//   contract: swish(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// Computed in f32 (f16 widened, rounded once at the end).

    .global swish
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
swish:                          # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- swish: setup and compute ----
// setup: every operand f16, or every operand f32
    setup_same_float
    li.f32   s3, 1.0
    vbcast.w v16, s3           # 1.0 (f32)
k_setup_end:
    ret

// compute: in f32 (fw_compute); k_body turns v1, v2, v9, v10 into the results
    .macro k_body
    vneg.f32 v5, v1
    vneg.f32 v6, v2
    vneg.f32 v13, v9
    vneg.f32 v14, v10
    vexp.f32 v5, v5
    vexp.f32 v6, v6
    vexp.f32 v13, v13
    vexp.f32 v14, v14
    vadd.f32 v5, v5, v16
    vadd.f32 v6, v6, v16
    vadd.f32 v13, v13, v16
    vadd.f32 v14, v14, v16
    vrcp.f32 v5, v5
    vrcp.f32 v6, v6
    vrcp.f32 v13, v13
    vrcp.f32 v14, v14
    vmul.f32 v1, v1, v5
    vmul.f32 v2, v2, v6
    vmul.f32 v9, v9, v13
    vmul.f32 v10, v10, v14
    .endm
    fw_compute k_body
