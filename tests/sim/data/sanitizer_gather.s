// Gathers 8 halves 2 bytes apart per iteration, 9 times over a 128-byte input: the
// ninth gather reads past its end, into %z.
    .global gather
    .text
gather:
    lw      s2, 0(s0)           # input dataAddr
    li      s3, 9
    li      s4, 2               # byte stride
body:
    vlds.h  v1, 0(s2), s4
    addi    s2, s2, 16
    loop    s3, body
    li      s0, 0
    halt
