// relu over a dense f16 tensor of any rank >= 1: out[i] = max(in[i], 0).
// Params: {MemRefData input; MemRefData output}.
    .global relu_f16
    .text
relu_f16:
    lw      s2, 0(s0)           # input dataAddr
    lw      s3, 32(s0)          # output dataAddr
    lw      s4, 8(s0)           # numDims
    lw      s5, 12(s0)          # dimsAddr
    li      s6, 1               # element count = product of the dims
dims:
    lw      s7, 0(s5)
    mul     s6, s6, s7
    addi    s5, s5, 4
    loop    s4, dims
    li      s9, 0
    vbcast.h v1, s9             # +0.0 in all lanes
    srli    s7, s6, 3           # whole vectors
    andi    s8, s6, 7           # tail elements
    beqz    s7, tail
body:
    vld     v3, 0(s2)
    vmax.f16 v3, v3, v1
    vst     v3, 0(s3)
    addi    s2, s2, 16
    addi    s3, s3, 16
    loop    s7, body
tail:
    beqz    s8, done
    vmask.h m0, s8
    vld.m   v3, 0(s2), m0
    vmax.f16 v3, v3, v1
    vst.m   v3, 0(s3), m0
done:
    li      s0, 0               # status: ok
    ret
