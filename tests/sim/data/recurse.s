// Calls itself forever, pushing lr each time: sp walks down out of the stack.
    .global recurse
    .text
recurse:
    addi    sp, sp, -16
    sw      lr, 0(sp)
    call    recurse
    li      s0, 0
    halt
