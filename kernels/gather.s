// gather: the rows of a table picked by run-time indices (ONNX Gather, an
// embedding lookup): output[a, n, :] = data[a, i(n) - first, :] for every n
// whose index i(n) (wrapped: i < 0 means i + extent, as ONNX says) lies in this
// call's chunk [first, first + K).  Rows of other chunks are left as they are,
// so a table larger than CMX is gathered chunk by chunk into one output.
//   contract: gather(data: memref<*xT>, indices: memref<*xI>, output: memref<*xT>, first: i32, extent: i32)
//             T any 1-, 2- or 4-byte type, the same for data and output; I = i32
//   params:   struct { MemRefData data, indices, output; i32 first; i32 extent; } 104 bytes
// Shapes: data [A, K, R], indices [N], output [A, N, R] (rank 3, 1, 3, identity
// orders), or data [K, R] and output [N, R] (rank 2, 1, 2: A = 1, a table in DDR
// bound as it is declared), rows dense.  Every index is checked before anything is written:
// one outside [-extent, extent) ends the call with E_INDEX and the index in s1.
// Each row is one scalar load of its index and a dense byte copy (the byte copy
// block: 128 bytes an iteration, then 32, then a masked tail).

    .global gather
    .equ NUM_IN, 2              # memref inputs; the output follows them
    .equ AXIS_KIND, 3           # 3: gather, no driver (0..2: driver kinds)
    .equ SCALARS, 96            # first, extent: after the three MemRefData
    .equ M_DATA, 0              # MemRefData field offsets
    .equ M_NDIMS, 8
    .equ M_DIMS, 12
    .equ M_STRIDES, 16
    .equ M_TYPE, 20
    .equ M_ORDER, 24
    .equ DT_I32, 9
    .equ E_TYPE, 1              # status codes
    .equ E_SHAPE, 2
    .equ E_ORDER, 3
    .equ E_INDEX, 4
    .text
gather:
    mov      s17, s0                  # argsAddr
    # types: data's and output's the same, with 1-, 2- or 4-byte storage; i32 indices
    li       s0, E_TYPE
    lw       s2, M_TYPE(s17)
    lw       s3, M_TYPE + 64(s17)
    bne      s2, s3, g_exit
    sltiu    s3, s2, 16
    beqz     s3, g_exit
    la       s4, g_esize
    add      s4, s4, s2
    lbu      s18, 0(s4)               # bytes per element
    beqz     s18, g_exit
    lw       s2, M_TYPE + 32(s17)
    li       s3, DT_I32
    bne      s2, s3, g_exit
    # ranks: data and output both 3, or both 2 (A = 1; s16 set); indices 1
    li       s0, E_SHAPE
    lw       s7, M_NDIMS(s17)         # the data's rank
    seqi     s16, s7, 2
    seqi     s3, s7, 3
    or       s3, s3, s16
    beqz     s3, g_exit
    lw       s2, M_NDIMS + 64(s17)
    bne      s2, s7, g_exit
    lw       s2, M_NDIMS + 32(s17)
    li       s3, 1
    bne      s2, s3, g_exit
    # orders: identity (or unset)
    li       s0, E_ORDER
    ld       s2, M_ORDER(s17)
    li       s4, 0x123
    beqz     s16, g_order
    li       s4, 0x12
g_order:
    seqi     s5, s2, 0
    seq      s6, s2, s4
    or       s5, s5, s6
    beqz     s5, g_exit
    ld       s2, M_ORDER + 64(s17)
    seqi     s5, s2, 0
    seq      s6, s2, s4
    or       s5, s5, s6
    beqz     s5, g_exit
    ld       s2, M_ORDER + 32(s17)
    sltiu    s5, s2, 2                # 0 or 0x1
    beqz     s5, g_exit
    # dims (innermost first): data R, K, A; output R, N, A; indices N
    li       s0, E_SHAPE
    lw       s4, M_DIMS(s17)
    lw       s19, 0(s4)               # R
    lw       s20, 4(s4)               # K: the chunk's rows
    lw       s21, 8(s4)               # A (rank 2: past the dims, replaced by 1)
    lw       s4, M_DIMS + 64(s17)
    lw       s5, 0(s4)
    bne      s5, s19, g_exit
    lw       s22, 4(s4)               # N
    lw       s5, 8(s4)
    beqz     s16, g_dims
    li       s21, 1
    li       s5, 1
g_dims:
    bne      s5, s21, g_exit
    lw       s4, M_DIMS + 32(s17)
    lw       s5, 0(s4)
    bne      s5, s22, g_exit
    # strides (bits, int64; their low words): rows dense, indices dense
    slli     s6, s18, 3               # an element's bits
    lw       s4, M_STRIDES(s17)
    lw       s5, 0(s4)
    bne      s5, s6, g_exit
    lw       s23, 8(s4)
    srli     s23, s23, 3              # data: bytes per K step
    lw       s24, 16(s4)
    srli     s24, s24, 3              # data: bytes per A step
    lw       s4, M_STRIDES + 64(s17)
    lw       s5, 0(s4)
    bne      s5, s6, g_exit
    lw       s25, 8(s4)
    srli     s25, s25, 3              # output: bytes per N step
    lw       s26, 16(s4)
    srli     s26, s26, 3              # output: bytes per A step
    lw       s4, M_STRIDES + 32(s17)
    lw       s5, 0(s4)
    li       s6, 32
    bne      s5, s6, g_exit
    lw       s27, SCALARS(s17)        # first
    lw       s28, SCALARS + 4(s17)    # extent
    mul      s19, s19, s18            # R in bytes
    lw       s29, M_DATA + 32(s17)    # the indices
    li       s0, 0
    beqz     s22, g_exit              # no rows
    # pass 1: every index within [-extent, extent), nothing written before
    mov      s8, s29
    mov      s9, s22
g_check:
    lw       s10, 0(s8)
    addi     s8, s8, 4
    slti     s11, s10, 0
    mul      s11, s11, s28
    add      s11, s10, s11            # wrapped
    sltu     s12, s11, s28            # 0 <= wrapped < extent
    beqz     s12, g_bad
    loop     s9, g_check
    # pass 2: the rows of this chunk, each as A dense byte copies
    lw       s14, M_DATA(s17)         # data
    lw       s15, M_DATA + 64(s17)    # output: row n's
    mov      s6, s29
    mov      s7, s22
g_row:
    lw       s10, 0(s6)
    addi     s6, s6, 4
    slti     s11, s10, 0
    mul      s11, s11, s28
    add      s11, s10, s11
    sub      s11, s11, s27            # row within the chunk
    sltu     s12, s11, s20
    beqz     s12, g_next
    mul      s11, s11, s23
    add      s12, s14, s11            # data row (a = 0)
    mov      s13, s15                 # output row (a = 0)
    mov      s16, s21                 # A
g_outer:                              # k_copy clobbers s2, s4, s5, s8..s11
    mov      s2, s12
    mov      s4, s13
    mov      s5, s19
    li       s8, 1
    call     k_copy
    add      s12, s12, s24
    add      s13, s13, s26
    loop     s16, g_outer
g_next:
    add      s15, s15, s25
    loop     s7, g_row
    li       s0, 0
g_exit:
    halt
g_bad:
    mov      s1, s10                  # the index at fault
    li       s0, E_INDEX
    halt

    .include "include/byte_copy.inc"

    .rodata
// bytes per element by dataType code; 0: no 1-, 2- or 4-byte storage
g_esize:
    .byte 0, 4, 2, 0, 0, 4, 2, 1, 0, 4, 2, 1, 0, 0, 0, 2
    .text
