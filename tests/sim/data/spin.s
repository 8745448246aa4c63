// Never ends: a loop with no exit.
    .global spin
    .text
spin:
    addi    s2, s2, 1
    j       spin
