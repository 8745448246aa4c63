// clamp: output = min(max(input, minVal), maxVal), elementwise (the Software Layers HLD's example).
//   contract: clamp(input: memref<*xT>, output: memref<*xT>, minVal: f16, maxVal: f16)
//             T = f16 or f32 (the bounds stay f16 in the params; widened for f32)
//   params:   struct { MemRefData input, output; f16 minVal, maxVal; }   68 bytes
// Computed in the tensor's type (exact).  NaN stays NaN.

    .global clamp
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .equ SCALARS, 64          # minVal, maxVal: after the two MemRefData
    .text
clamp:                          # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- clamp: setup and compute ----
// setup: same float type everywhere; minVal/maxVal (f16 scalars) into v16/v17
    setup_same_float
    lhu      s3, SCALARS(s17)         # minVal
    lhu      s4, SCALARS + 2(s17)     # maxVal
    bnez     s2, k_setup_f32
    vbcast.h v16, s3
    vbcast.h v17, s4
    ret
k_setup_f32:
    fcvt.f32.f16 s3, s3
    fcvt.f32.f16 s4, s4
    vbcast.w v16, s3
    vbcast.w v17, s4
k_setup_end:
    ret

// compute: one input, two instructions per vector (max, then min)
    .macro k_max ty, d, b
    vmax.\ty \d, \d, v16         # v16 = minVal
    .endm
    .macro k_min ty, d
    vmin.\ty \d, \d, v17         # v17 = maxVal
    .endm
    ew_compute2 1, k_max, k_min
