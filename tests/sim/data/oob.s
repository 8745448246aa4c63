// Stores one word 64 bytes past the end of its output buffer's tile CMX mapping.
    .global oob
    .text
oob:
    lw      s2, 32(s0)          # output dataAddr
    li      s3, 0x100000
    add     s2, s2, s3          # 1 MiB further: outside the tile's CMX
    sw      s3, 0(s2)
    halt
