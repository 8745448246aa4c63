// gelu: the tanh approximation, elementwise:
//   output = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//          = x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))     (the form computed)
//   contract: gelu(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// Computed in f32.  0.5 (1 + tanh u) = sigmoid(2u) avoids the cancellation of
// 1 + tanh(u) for negative x: x / (1 + exp(-x (K0 + K1 x^2))), K0 = 2 sqrt(2/pi),
// K1 = K0 * 0.044715.

    .global gelu
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
gelu:                           # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- gelu: setup and compute ----
// setup: every operand f16, or every operand f32
    setup_same_float
    li.f32   s3, 1.0
    vbcast.w v16, s3           # 1.0 (f32)
    li.f32   s3, 0.07135481627159562
    vbcast.w v17, s3           # K1
    li.f32   s3, 1.5957691216057308
    vbcast.w v18, s3           # K0
k_setup_end:
    ret

// compute: in f32 (fw_compute); k_body turns v1, v2, v9, v10 into the results
    .macro k_body
    vmul.f32 v5, v1, v1
    vmul.f32 v6, v2, v2
    vmul.f32 v13, v9, v9
    vmul.f32 v14, v10, v10
    vfma.f32 v5, v5, v17, v18
    vfma.f32 v6, v6, v17, v18
    vfma.f32 v13, v13, v17, v18
    vfma.f32 v14, v14, v17, v18
    vmul.f32 v5, v5, v1
    vmul.f32 v6, v6, v2
    vmul.f32 v13, v13, v9
    vmul.f32 v14, v14, v10
    vneg.f32 v5, v5
    vneg.f32 v6, v6
    vneg.f32 v13, v13
    vneg.f32 v14, v14
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
