// sigmoid: output = 1 / (1 + exp(-input)), elementwise.
//   contract: sigmoid(input: memref<*xT>, output: memref<*xT>), T = f16 or f32
//   params:   struct { MemRefData input, output; }              64 bytes
// Computed in f32 (f16 inputs are widened, the result rounded once): in f16,
// exp(-x) overflows for x < -11.1 and sigmoid would flush to 0 where the true
// value (down to 6e-8) is still representable.

    .global sigmoid
    .equ NUM_IN, 1              # memref inputs; the output follows them
    .equ AXIS_KIND, 0           # 0 elementwise, 1 softmax, 2 reduction
    .text
sigmoid:                        # entry: the shared driver
    .include "include/driver.inc"
    .include "include/eltwise_row.inc"

// ---- sigmoid: setup and compute ----
// setup: every operand f16, or every operand f32; 1.0 in v16
    fw_setup_one
k_setup_end:
    ret

// compute: in f32 (fw_compute), 1 / (1 + exp(-x)) with the shared steps
    fw_compute fw_negx, fw_exp, fw_none, fw_none, fw_none, fw_inc, fw_rcp, fw_none
