// Loads a word from 128 bytes before its input: a buffer the task does not bind.
    .global peek
    .text
peek:
    lw      s2, 0(s0)           # input dataAddr
    lw      s3, -128(s2)
    li      s0, 0
    halt
