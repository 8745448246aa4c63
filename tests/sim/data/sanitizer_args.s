// Overwrites the first word of its own argument image (read-only for the kernel).
    .global scribble
    .text
scribble:
    sw      s0, 0(s0)
    li      s0, 0
    halt
