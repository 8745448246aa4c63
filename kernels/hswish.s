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

// compute: in f32 (fw_compute), a chain of one-instruction steps on X -> T
    .macro k_add3 x, t
    vadd.f32 \t, \x, v17         # x + 3
    .endm
    .macro k_max0 x, t
    vmax.f32 \t, \t, v19
    .endm
    .macro k_min6 x, t
    vmin.f32 \t, \t, v18
    .endm
    .macro k_mulx x, t
    vmul.f32 \t, \x, \t
    .endm
    .macro k_sixth x, t
    vmul.f32 \t, \t, v20
    .endm
    fw_compute k_add3, k_max0, fw_none, fw_none, fw_none, k_min6, k_mulx, k_sixth
