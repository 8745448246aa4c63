// topk: the K largest (or smallest) values of each row and their indices,
// sorted best first, ties to the lower index, as onnxruntime orders them:
// every NaN (either sign) ranks above +inf for largest and below it for
// smallest (so last), -0 ties +0.
//   contract: topk(input: memref<*xT>, values: memref<*xT>, indices: memref<*xI>, k: i32, largest: i32)
//             T = f16 or f32, the same for input and values; I = i32
//   params:   struct { MemRefData input, values, indices; i32 k; i32 largest; } 104 bytes
// Shapes: input [R, N], values [R, K], indices [R, K] (rank 2, identity
// orders, rows dense), 1 <= K = k <= N.
// Algorithm: a K-element partial selection by a binary min-heap of (key,
// index), the worst kept element at its root, held in the row's own outputs
// (keys in values, indices in indices): the first K elements heapified, each
// later one replacing the root only if strictly better (an equal key has the
// greater index, so it is worse), then heapsorted in place (the worst
// extracted to the end) and the keys replaced by the input's values read back
// through the indices.  O(N log K) compares whatever the data, where K scans
// would be O(N K).  Keys are integers ordered as onnxruntime orders floats:
// |bits| (a NaN's: the greatest) negated for a negative value, negated again
// for smallest; signed compares then give the order, ties by index.

    .global topk
    .equ NUM_IN, 1              # memref inputs; the outputs follow them
    .equ NUM_OUT, 2             # values, indices
    .equ AXIS_KIND, 4           # 4: topk, no driver
    .equ SCALARS, 96            # k, largest: after the three MemRefData
    .equ M_DATA, 0              # MemRefData field offsets
    .equ M_NDIMS, 8
    .equ M_DIMS, 12
    .equ M_STRIDES, 16
    .equ M_TYPE, 20
    .equ M_ORDER, 24
    .equ DT_F32, 1
    .equ DT_F16, 2
    .equ DT_I32, 9
    .equ E_TYPE, 1              # status codes
    .equ E_SHAPE, 2
    .equ E_ORDER, 3
    .text
topk:
    mov      s17, s0                  # argsAddr
    # types: input and values f16 or f32, the same; indices i32
    li       s0, E_TYPE
    lw       s2, M_TYPE(s17)
    lw       s3, M_TYPE + 32(s17)
    bne      s2, s3, t_exit
    seqi     s3, s2, DT_F16
    seqi     s4, s2, DT_F32
    or       s3, s3, s4
    beqz     s3, t_exit
    mov      s1, s2                   # the element type
    lw       s2, M_TYPE + 64(s17)
    li       s3, DT_I32
    bne      s2, s3, t_exit
    # ranks 2, orders identity (or unset)
    li       s0, E_SHAPE
    li       s3, 2
    lw       s2, M_NDIMS(s17)
    bne      s2, s3, t_exit
    lw       s2, M_NDIMS + 32(s17)
    bne      s2, s3, t_exit
    lw       s2, M_NDIMS + 64(s17)
    bne      s2, s3, t_exit
    li       s0, E_ORDER
    li       s4, 0x12
    ld       s2, M_ORDER(s17)
    seqi     s5, s2, 0
    seq      s6, s2, s4
    or       s5, s5, s6
    beqz     s5, t_exit
    ld       s2, M_ORDER + 32(s17)
    seqi     s5, s2, 0
    seq      s6, s2, s4
    or       s5, s5, s6
    beqz     s5, t_exit
    ld       s2, M_ORDER + 64(s17)
    seqi     s5, s2, 0
    seq      s6, s2, s4
    or       s5, s5, s6
    beqz     s5, t_exit
    # dims (innermost first): input N, R; values and indices K, R; K = k in [1, N]
    li       s0, E_SHAPE
    lw       s4, M_DIMS(s17)
    lw       s19, 0(s4)               # N
    lw       s20, 4(s4)               # R
    lw       s21, SCALARS(s17)        # K
    lw       s22, SCALARS + 4(s17)    # largest
    seqi     s22, s22, 0              # 1: smallest, the keys negated
    lw       s4, M_DIMS + 32(s17)
    lw       s5, 0(s4)
    bne      s5, s21, t_exit
    lw       s5, 4(s4)
    bne      s5, s20, t_exit
    lw       s4, M_DIMS + 64(s17)
    lw       s5, 0(s4)
    bne      s5, s21, t_exit
    lw       s5, 4(s4)
    bne      s5, s20, t_exit
    li       s5, 1
    blt      s21, s5, t_exit
    blt      s19, s21, t_exit
    # strides (bits; low words): rows dense
    seqi     s6, s1, DT_F16
    li       s7, 32
    slli     s6, s6, 4
    sub      s6, s7, s6               # an element's bits: 16 or 32
    lw       s4, M_STRIDES(s17)
    lw       s5, 0(s4)
    bne      s5, s6, t_exit
    lw       s24, 8(s4)
    srli     s24, s24, 3              # input: bytes per row
    lw       s4, M_STRIDES + 32(s17)
    lw       s5, 0(s4)
    bne      s5, s6, t_exit
    lw       s26, 8(s4)
    srli     s26, s26, 3              # values: bytes per row
    lw       s4, M_STRIDES + 64(s17)
    lw       s5, 0(s4)
    bne      s5, s7, t_exit
    lw       s28, 8(s4)
    srli     s28, s28, 3              # indices: bytes per row
    lw       s23, M_DATA(s17)
    lw       s25, M_DATA + 32(s17)
    lw       s27, M_DATA + 64(s17)
    li       s0, 0
    beqz     s20, t_exit              # no rows
    li       s2, DT_F32
    beq      s1, s2, t_rows_f32
    li       s14, 0x7FFF              # |bits| mask, and a NaN's key
    li       s15, 0x7C00              # +inf's bits: above them, NaN
    j        t_rows_f16
t_rows_f32:
    li       s14, 0x7FFFFFFF
    li       s15, 0x7F800000
    j        t_rows_w
t_exit:
    halt

// key: the raw bits in s8 become the element's order key (clobbers s9..s11)
    .macro key sign
    srli     s9, s8, \sign            # the sign bit
    and      s8, s8, s14              # |bits|
    sltu     s10, s15, s8             # NaN
    mul      s11, s10, s14
    maxu     s8, s8, s11              # a NaN's key: the greatest
    xori     s10, s10, 1
    and      s9, s9, s10              # a NaN is never negated
    xor      s9, s9, s22              # smallest: every key negated
    muli     s9, s9, -1               # 0 or all ones
    xor      s8, s8, s9
    sub      s8, s8, s9
    .endm

// one element type's rows: keys \ld / \st of \size bytes, raw loads \raw
    .macro rows ty, size, shift, ld, st, raw, sign
t_rows_\ty:
// phase 1: the first K elements, keyed, with their indices
    mov      s2, s23
    mov      s3, s25
    mov      s4, s27
    li       s5, 0
    mov      s6, s21
t_fill_\ty:
    \raw     s8, 0(s2)
    key      \sign
    \st      s8, 0(s3)
    sw       s5, 0(s4)
    addi     s2, s2, \size
    addi     s3, s3, \size
    addi     s4, s4, 4
    addi     s5, s5, 1
    loop     s6, t_fill_\ty
// heapify: sift down every parent, the last first
    srli     s29, s21, 1
    beqz     s29, t_scan_\ty
t_heapify_\ty:
    addi     s29, s29, -1
    mov      s2, s29
    mov      s3, s21
    slli     s7, s2, \shift
    add      s7, s7, s25
    \ld      s4, 0(s7)
    slli     s9, s2, 2
    add      s9, s9, s27
    lw       s5, 0(s9)
    call     t_sift_\ty
    bnez     s29, t_heapify_\ty
// phase 2: each later element replaces the root if strictly better
t_scan_\ty:
    mov      s29, s21
    slli     s16, s21, \shift
    add      s16, s16, s23
t_scan_next_\ty:
    bge      s29, s19, t_sort_\ty
    \raw     s8, 0(s16)
    key      \sign
    \ld      s12, 0(s25)
    bge      s12, s8, t_scan_skip_\ty
    mov      s4, s8
    mov      s5, s29
    li       s2, 0
    mov      s3, s21
    call     t_sift_\ty
t_scan_skip_\ty:
    addi     s29, s29, 1
    addi     s16, s16, \size
    j        t_scan_next_\ty
// phase 3: heapsort, the worst root moved to the end each time
t_sort_\ty:
    mov      s29, s21
t_sort_next_\ty:
    li       s12, 1
    bge      s12, s29, t_values_\ty
    addi     s29, s29, -1
    slli     s7, s29, \shift
    add      s7, s7, s25
    \ld      s4, 0(s7)
    \ld      s8, 0(s25)
    \st      s8, 0(s7)
    slli     s9, s29, 2
    add      s9, s9, s27
    lw       s5, 0(s9)
    lw       s10, 0(s27)
    sw       s10, 0(s9)
    li       s2, 0
    mov      s3, s29
    call     t_sift_\ty
    j        t_sort_next_\ty
// phase 4: the values read back through the indices
t_values_\ty:
    mov      s2, s25
    mov      s3, s27
    mov      s6, s21
t_value_\ty:
    lw       s8, 0(s3)
    slli     s8, s8, \shift
    add      s8, s8, s23
    \raw     s9, 0(s8)
    \st      s9, 0(s2)
    addi     s2, s2, \size
    addi     s3, s3, 4
    loop     s6, t_value_\ty
    add      s23, s23, s24
    add      s25, s25, s26
    add      s27, s27, s28
    loop     s20, t_rows_\ty
    li       s0, 0
    halt

// sift down: the item (key s4, index s5) placed from slot s2 of a heap of s3,
// children that are worse moved up (clobbers s2, s6..s13)
t_sift_\ty:
    slli     s6, s2, 1
    addi     s6, s6, 1                # the first child
    bge      s6, s3, t_sift_put_\ty
    slli     s7, s6, \shift
    add      s7, s7, s25
    \ld      s8, 0(s7)
    slli     s9, s6, 2
    add      s9, s9, s27
    lw       s10, 0(s9)
    addi     s11, s6, 1
    bge      s11, s3, t_sift_one_\ty
    \ld      s12, \size(s7)
    lw       s13, 4(s9)
    blt      s12, s8, t_sift_second_\ty
    bne      s12, s8, t_sift_one_\ty
    blt      s13, s10, t_sift_one_\ty
t_sift_second_\ty:                    # the second child is the worse
    mov      s6, s11
    mov      s8, s12
    mov      s10, s13
t_sift_one_\ty:                       # the worse child against the item
    blt      s8, s4, t_sift_up_\ty
    bne      s8, s4, t_sift_put_\ty
    blt      s10, s5, t_sift_put_\ty
t_sift_up_\ty:
    slli     s7, s2, \shift
    add      s7, s7, s25
    \st      s8, 0(s7)
    slli     s9, s2, 2
    add      s9, s9, s27
    sw       s10, 0(s9)
    mov      s2, s6
    j        t_sift_\ty
t_sift_put_\ty:
    slli     s7, s2, \shift
    add      s7, s7, s25
    \st      s4, 0(s7)
    slli     s9, s2, 2
    add      s9, s9, s27
    sw       s5, 0(s9)
    ret
    .endm

    rows     f16, 2, 1, lh, sh, lhu, 15
    rows     w, 4, 2, lw, sw, lw, 31
