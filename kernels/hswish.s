// hswish: output = x * min(max(x + 3, 0), 6) / 6, elementwise.
//   contract: hswish(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// Computed in f32 (f16 widened, rounded once), the division as a multiply by
// f32(1/6).

    .global hswish
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
hswish:                         # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- hswish: setup and compute ----
// setup: every operand f16, or every operand f32
    setup_same_float
    li.f32   s3, 3.0
    vbcast.w v17, s3
    li.f32   s3, 6.0
    vbcast.w v18, s3
    vxor     v19, v19, v19
    li.f32   s3, 0.16666666666666666
    vbcast.w v20, s3           # 1/6
k_setup_end:
    ret

// compute: in f32 (fw_compute); k_body turns v1, v2, v9, v10 into the results
    .macro k_body
    vadd.f32 v5, v1, v17
    vadd.f32 v6, v2, v17
    vadd.f32 v13, v9, v17
    vadd.f32 v14, v10, v17
    vmax.f32 v5, v5, v19
    vmax.f32 v6, v6, v19
    vmax.f32 v13, v13, v19
    vmax.f32 v14, v14, v19
    vmin.f32 v5, v5, v18
    vmin.f32 v6, v6, v18
    vmin.f32 v13, v13, v18
    vmin.f32 v14, v14, v18
    vmul.f32 v1, v1, v5
    vmul.f32 v2, v2, v6
    vmul.f32 v9, v9, v13
    vmul.f32 v10, v10, v14
    vmul.f32 v1, v1, v20
    vmul.f32 v2, v2, v20
    vmul.f32 v9, v9, v20
    vmul.f32 v10, v10, v20
    .endm
    fw_compute k_body
