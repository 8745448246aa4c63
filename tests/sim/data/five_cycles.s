// The example of docs/shave-isa.md, "Timing model": issues at 0, 1, 2, 3; s3 is ready
// at 2 + 3 = 5, so the kernel takes 5 cycles.  (Status 0 in s0 issues with muli.)
    .global five
    .text
five:
    li      s1, 5
    addi    s2, s1, 1
    muli    s3, s2, 3
    li      s0, 0
    halt
