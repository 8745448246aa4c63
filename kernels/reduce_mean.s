// reduce_mean: the mean over the innermost logical axis R (the last logical dim);
// the output has extent 1 along R.  Accumulates in f32.
//   contract: reduce_mean(input: memref<*xA>, output: memref<*xB>), A, B in {f16, f32}
//   params:   struct { MemRefData input, output; }              64 bytes
// R is found through dimsOrder.  H rows (R dense and long) accumulate 8 lanes
// per step and finish with a pairwise tree; V groups accumulate 4 rows at once,
// one per lane, stepping along R with its stride.  The mean is sum / n (correctly rounded f32 division).

    .global reduce_mean
    .equ NUM_IN, 1            # memref inputs; the output follows them
    .equ AXIS_KIND, 2         # 0 elementwise, 1 softmax (keeps R), 2 reduction (R -> 1)
    .text
reduce_mean:                       # entry: the shared driver below
// ==== BEGIN SHARED: driver ====
// Identical in every library kernel but runtime (tests/kernels checks it).
// The driver reads the params struct through the contract, checks element
// types and shapes, and builds one iteration space in the *output's* memory
// order (innermost first):
//   D[i]     extent of dim i: the numpy broadcast of the operands' dims;
//   S[k][i]  byte stride of operand k along dim i, 0 where operand k has
//            extent 1 (size-1 broadcasting) or rank 0 (a scalar in memory).
// An operand stored in another dimsOrder is mapped dim by dim through the
// dimsOrder nibbles, so layouts may differ between operands.  A dynamic
// output (isStatic = 0) gets its dims and dense strides written here.  For
// AXIS_KIND != 0 the dim holding the last logical dim (the reduced axis R) is
// taken out of the space (F_DR, F_SR).  Size-1 dims are then dropped and dims
// that are dense for every operand merged, so a dense tensor is one row.
// The walker then calls `row` once per position of dims 1.. (an odometer).
// Status in s0 at halt: 0 ok, E_TYPE / E_SHAPE / E_ORDER (nothing written).
    .equ M_DATA, 0              # MemRefData field offsets
    .equ M_STATIC, 4
    .equ M_NDIMS, 8
    .equ M_DIMS, 12
    .equ M_STRIDES, 16
    .equ M_TYPE, 20
    .equ M_ORDER, 24
    .equ DT_F32, 1              # dataType codes
    .equ DT_F16, 2
    .equ MAX_RANK, 15
    .equ E_TYPE, 1              # status codes
    .equ E_SHAPE, 2
    .equ E_ORDER, 3
    .equ NUM_OPS, NUM_IN + 1    # operands: the inputs, then the output
    .equ F_D, 0                 # frame: u32 D[16]
    .equ F_S, 64                #   i32 S[3][16], 64 bytes per operand
    .equ F_IDX, 256             #   u32 odometer[16]
    .equ F_PTR, 320             #   u32 per operand: base of the current row
    .equ F_RP, 336              #   u32 per operand: running pointer in the row
    .equ F_SRC, 352             #   u32 per operand: what compute reads/writes
    .equ F_ES, 368              #   u32 per operand: bytes per element
    .equ F_DT, 384              #   u32 per operand: dataType
    .equ F_SR, 400              #   i32 per operand: byte stride along R
    .equ F_DR, 416              #   u32 extent of R
    .equ F_LR, 420              #   saved lr of row
    .equ F_SCR, 448             #   staging scratch, SCR_BYTES per operand
    .equ SCR_SHIFT, 10
    .equ SCR_BYTES, 1 << SCR_SHIFT
    .equ CHUNK, SCR_BYTES / 4   # elements staged at a time (f32 fills it)
    .equ FRAME, F_SCR + 3 * SCR_BYTES
drv_main:
    addi    sp, sp, -FRAME
    mov     s16, sp                 # fp
    mov     s17, s0                 # argsAddr
    li      s18, NUM_OPS
    addi    s20, s17, NUM_IN * 32   # the output's MemRefData
    lw      s19, M_NDIMS(s20)       # rank r: the output's
    li      s0, E_SHAPE
    sltiu   s2, s19, MAX_RANK + 1
    beqz    s2, drv_exit
    # element type and size of every operand
    li      s8, 0
    mov     s9, s17
    la      s10, drv_esize
drv_types:
    lw      s2, M_TYPE(s9)
    li      s0, E_TYPE
    sltiu   s3, s2, 16
    beqz    s3, drv_exit
    add     s3, s10, s2
    lbu     s3, 0(s3)
    beqz    s3, drv_exit            # no 2- or 4-byte storage
    slli    s4, s8, 2
    add     s4, s4, s16
    sw      s2, F_DT(s4)
    sw      s3, F_ES(s4)
    addi    s9, s9, 32
    addi    s8, s8, 1
    blt     s8, s18, drv_types
    lw      s6, F_DT(s16)
    lw      s7, F_DT + NUM_IN * 4(s16)
    call    setup                   # kernel-specific: types, scalars, constants
    bnez    s0, drv_exit
    # D[i] = 1, S[k][i] = 0 (rank 0 iterates one element)
    li      s2, 1
    li      s3, 0
    max     s8, s19, s2
    mov     s9, s16
drv_clear:
    sw      s2, F_D(s9)
    sw      s3, F_S(s9)
    sw      s3, F_S + 64(s9)
    sw      s3, F_S + 128(s9)
    addi    s9, s9, 4
    loop    s8, drv_clear
    ld      s22, M_ORDER(s20)       # output dimsOrder: s22 low, s23 high
    # R: the memory position of the last logical dim (nibble == r); 0 when
    # the order is unset (identity) or the rank is 0
    li      s21, 0
    li      s2, AXIS_KIND
    beqz    s2, drv_inputs
    beqz    s19, drv_inputs
    or      s2, s22, s23
    beqz    s2, drv_inputs
drv_find_r:
    li      s0, E_ORDER
    bge     s21, s19, drv_exit
    mov     s2, s22
    mov     s3, s23
    mov     s4, s21
    call    drv_nibble
    beq     s2, s19, drv_inputs
    addi    s21, s21, 1
    j       drv_find_r
    # inputs: rank r (mapped through the dimsOrders) or rank 0 (a scalar)
drv_inputs:
    li      s24, 0                  # k
drv_in_next:
    li      s2, NUM_IN
    bge     s24, s2, drv_output
    slli    s25, s24, 5
    add     s25, s25, s17           # its MemRefData
    slli    s27, s24, 6
    add     s27, s27, s16           # its stride row (+ F_S)
    addi    s24, s24, 1
    lw      s2, M_NDIMS(s25)
    beqz    s2, drv_in_next         # rank 0: strides stay 0
    li      s0, E_SHAPE
    bne     s2, s19, drv_exit
    ld      s28, M_ORDER(s25)       # s28 low, s29 high
    li      s8, 0                   # i: output memory position
drv_map:
    mov     s9, s8                  # j: the operand's position of the same logical dim
    bne     s28, s22, drv_search
    beq     s29, s23, drv_mapped
drv_search:
    mov     s2, s22
    mov     s3, s23
    mov     s4, s8
    call    drv_nibble
    mov     s10, s2
    li      s9, 0
drv_search_j:
    li      s0, E_ORDER
    bge     s9, s19, drv_exit
    mov     s2, s28
    mov     s3, s29
    mov     s4, s9
    call    drv_nibble
    beq     s2, s10, drv_mapped
    addi    s9, s9, 1
    j       drv_search_j
drv_mapped:
    lw      s11, M_DIMS(s25)
    slli    s12, s9, 2
    add     s11, s11, s12
    lw      s11, 0(s11)             # d = dims[j]
    lw      s12, M_STRIDES(s25)
    slli    s13, s9, 3
    add     s12, s12, s13
    ld      s12, 0(s12)             # strides[j] in bits (int64)
    srli    s12, s12, 3
    slli    s13, s13, 29
    or      s12, s12, s13           # in bytes
    li      s13, 1
    beq     s11, s13, drv_map_next  # size 1: broadcast along i
    slli    s14, s8, 2
    add     s15, s14, s27
    sw      s12, F_S(s15)
    add     s15, s14, s16
    lw      s13, F_D(s15)
    li      s0, E_SHAPE
    li      s12, 1
    beq     s13, s12, drv_set_d
    bne     s13, s11, drv_exit      # neither equal nor 1: not broadcastable
drv_set_d:
    sw      s11, F_D(s15)
drv_map_next:
    addi    s8, s8, 1
    blt     s8, s19, drv_map
    j       drv_in_next
    # the output: static dims must match D (1 along R for reductions);
    # dynamic ones are written: D (1 along R), dense strides
drv_output:
    lw      s26, M_STATIC(s20)
    lw      s27, M_DIMS(s20)
    lw      s28, M_STRIDES(s20)
    lw      s29, F_ES + NUM_IN * 4(s16)
    slli    s29, s29, 3             # dense stride in bits, running
    addi    s25, s16, NUM_IN * 64
    li      s8, 0
    beqz    s19, drv_axis
drv_out_dim:
    slli    s14, s8, 2
    add     s15, s14, s16
    lw      s13, F_D(s15)
    li      s2, AXIS_KIND
    li      s3, 2
    seq     s24, s2, s3
    seq     s2, s8, s21
    and     s24, s24, s2            # this is the reduced axis of a reduction
    bnez    s26, drv_out_static
    mov     s11, s13
    beqz    s24, drv_out_write
    li      s11, 1
drv_out_write:
    add     s2, s27, s14
    sw      s11, 0(s2)
    slli    s3, s8, 3
    add     s3, s28, s3
    li      s4, 0
    sw      s29, 0(s3)
    sw      s4, 4(s3)
    srli    s12, s29, 3
    mul     s29, s29, s11
    j       drv_out_check
drv_out_static:
    add     s2, s27, s14
    lw      s11, 0(s2)
    slli    s3, s8, 3
    add     s3, s28, s3
    ld      s2, 0(s3)
    srli    s2, s2, 3
    slli    s3, s3, 29
    or      s12, s2, s3
drv_out_check:
    li      s0, E_SHAPE
    li      s3, 1
    beqz    s24, drv_out_plain
    bne     s11, s3, drv_exit       # a reduction's output has 1 along R
    j       drv_out_next
drv_out_plain:
    beq     s11, s3, drv_out_one
    beq     s13, s3, drv_out_grow   # inputs broadcast along an output dim
    bne     s13, s11, drv_exit
drv_out_grow:
    sw      s11, F_D(s15)
    add     s2, s25, s14
    sw      s12, F_S(s2)
    j       drv_out_next
drv_out_one:
    bne     s13, s3, drv_exit
drv_out_next:
    addi    s8, s8, 1
    blt     s8, s19, drv_out_dim
    # take R out of the space: F_DR, F_SR[k]; D[R] = 1 drops it below
drv_axis:
    li      s2, 1
    max     s19, s19, s2            # rank 0 iterates one element
    slli    s14, s21, 2
    add     s15, s14, s16
    lw      s2, F_D(s15)
    sw      s2, F_DR(s16)
    li      s2, AXIS_KIND
    beqz    s2, drv_coalesce
    li      s2, 1
    sw      s2, F_D(s15)
    li      s2, 0
drv_axis_k:
    slli    s3, s2, 6
    add     s3, s3, s15
    lw      s3, F_S(s3)
    slli    s4, s2, 2
    add     s4, s4, s16
    sw      s3, F_SR(s4)
    addi    s2, s2, 1
    blt     s2, s18, drv_axis_k
    # drop size-1 dims, merge dims dense for every operand; any 0: no work
drv_coalesce:
    lw      s2, F_DR(s16)
    beqz    s2, drv_done
    li      s8, 0                   # i: read
    li      s9, 0                   # w: write
drv_co_dim:
    slli    s14, s8, 2
    add     s15, s16, s14
    lw      s10, F_D(s15)
    beqz    s10, drv_done
    li      s2, 1
    beq     s10, s2, drv_co_next
    beqz    s9, drv_co_new
    addi    s11, s9, -1
    slli    s11, s11, 2
    add     s12, s16, s11
    lw      s13, F_D(s12)           # D[w-1], merged so far
    li      s2, 0
drv_co_test:
    slli    s3, s2, 6
    add     s3, s3, s16
    add     s4, s3, s14
    lw      s4, F_S(s4)
    add     s5, s3, s11
    lw      s5, F_S(s5)
    mul     s5, s5, s13
    bne     s4, s5, drv_co_new
    addi    s2, s2, 1
    blt     s2, s18, drv_co_test
    mul     s13, s13, s10
    sw      s13, F_D(s12)
    j       drv_co_next
drv_co_new:
    slli    s11, s9, 2
    add     s12, s16, s11
    sw      s10, F_D(s12)
    li      s2, 0
drv_co_copy:
    slli    s3, s2, 6
    add     s3, s3, s16
    add     s4, s3, s14
    lw      s4, F_S(s4)
    add     s5, s3, s11
    sw      s4, F_S(s5)
    addi    s2, s2, 1
    blt     s2, s18, drv_co_copy
    addi    s9, s9, 1
drv_co_next:
    addi    s8, s8, 1
    blt     s8, s19, drv_co_dim
    bnez    s9, drv_co_done
    li      s2, 1                   # a single element
    sw      s2, F_D(s16)
    li      s9, 1
drv_co_done:
    mov     s19, s9                 # r': rank of the iteration space
    # s20 bit k: operand k is contiguous along dim 0 (stride = element size)
    li      s20, 0
    li      s2, 0
drv_contig:
    slli    s3, s2, 2
    add     s3, s3, s16
    lw      s4, F_ES(s3)
    slli    s5, s2, 6
    add     s5, s5, s16
    lw      s5, F_S(s5)
    bne     s4, s5, drv_contig_next
    li      s4, 1
    sll     s4, s4, s2
    or      s20, s20, s4
drv_contig_next:
    addi    s2, s2, 1
    blt     s2, s18, drv_contig
    # row pointers at the data (a third operand only for binary kernels)
    lw      s2, M_DATA(s17)
    sw      s2, F_PTR(s16)
    lw      s2, M_DATA + 32(s17)
    sw      s2, F_PTR + 4(s16)
    li      s2, 0
    li      s3, NUM_OPS
    li      s4, 3
    bne     s3, s4, drv_ptr_set
    lw      s2, M_DATA + 64(s17)
drv_ptr_set:
    sw      s2, F_PTR + 8(s16)
    # odometer at 0
    li      s2, 0
    mov     s8, s19
    mov     s9, s16
drv_idx:
    sw      s2, F_IDX(s9)
    addi    s9, s9, 4
    loop    s8, drv_idx
    # row keeps s16..s20
drv_row:
    call    row
    li      s8, 1                   # dim 1 ticks first
drv_tick:
    bge     s8, s19, drv_done
    slli    s14, s8, 2
    add     s15, s16, s14
    lw      s10, F_IDX(s15)
    lw      s11, F_D(s15)
    lw      s2, F_S(s15)
    lw      s3, F_S + 64(s15)
    lw      s4, F_S + 128(s15)
    addi    s10, s10, 1
    bltu    s10, s11, drv_step
    li      s10, 0                  # wrap: back to the start of dim i, carry
    sw      s10, F_IDX(s15)
    addi    s11, s11, -1
    mul     s2, s2, s11
    mul     s3, s3, s11
    mul     s4, s4, s11
    li      s5, 0
    sub     s2, s5, s2
    sub     s3, s5, s3
    sub     s4, s5, s4
    addi    s8, s8, 1
    j       drv_move
drv_step:
    sw      s10, F_IDX(s15)
    li      s8, 0                   # step done: next row after the move
drv_move:
    lw      s5, F_PTR(s16)
    lw      s6, F_PTR + 4(s16)
    lw      s7, F_PTR + 8(s16)
    add     s5, s5, s2
    add     s6, s6, s3
    add     s7, s7, s4
    sw      s5, F_PTR(s16)
    sw      s6, F_PTR + 4(s16)
    sw      s7, F_PTR + 8(s16)
    beqz    s8, drv_row
    j       drv_tick
drv_done:
    li      s0, 0
drv_exit:
    addi    sp, s16, FRAME
    halt

// drv_nibble: s2 = nibble s4 of the 64-bit dimsOrder (s2 low, s3 high);
// clobbers s5, s6
drv_nibble:
    slli    s5, s4, 2
    sltiu   s6, s5, 32
    beqz    s6, drv_nibble_high
    srl     s2, s2, s5
    andi    s2, s2, 15
    ret
drv_nibble_high:
    addi    s5, s5, -32
    srl     s2, s3, s5
    andi    s2, s2, 15
    ret

// drv_same_float: s0 = 0 when every operand has dataType s6 and s6 is f16
// or f32, else E_TYPE; s2 = 1 for f32.  Clobbers s3..s5.
drv_same_float:
    li      s0, E_TYPE
    li      s2, 0
drv_same_k:
    slli    s3, s2, 2
    add     s3, s3, s16
    lw      s3, F_DT(s3)
    bne     s3, s6, drv_same_end
    addi    s2, s2, 1
    blt     s2, s18, drv_same_k
    seqi    s2, s6, DT_F32
    seqi    s3, s6, DT_F16
    or      s3, s3, s2
    beqz    s3, drv_same_end
    li      s0, 0
drv_same_end:
    ret

    .rodata
// bytes per element by dataType code; 0: not supported by the driver
drv_esize:
    .byte 0, 4, 2, 0, 0, 4, 2, 0, 0, 4, 2, 0, 0, 0, 0, 2
    .text
// ==== END SHARED: driver ====

// ==== BEGIN SHARED: reduce row ====
// Identical in softmax and the reductions (tests/kernels checks it).
// row: every position along dim 0 of the space reduces along R, one of two
// ways.  H: one row at a time, vectorized along R, when R is contiguous for
// the input (and for softmax's output) and the rows are long (>= H_MIN), or
// when there is only one row.  V: otherwise (R strided, e.g. NHWC where R = W
// is not innermost in memory, or many short rows): 4 positions of dim 0 at a
// time, one per f32 lane, with strided masked loads stepping along R.
// reduce_row's contract: s2 = input row (dense), s4 = output (softmax: a
// dense row; reductions: the element), s5 = n >= 1, s6 / s7 = dataTypes.
// reduce_group's: s2 = input at lane 0, s3 = its lane stride (bytes),
// s4 = output at lane 0, s10 = its lane stride, s11 = active lanes (1..4),
// s5 = n >= 1 along R, s8 / s9 = input / output stride along R, s6 / s7 =
// dataTypes.  Both may clobber s2..s15, v0..v15, m0..m7; keep v16..v31.
    .equ H_MIN, 32
row:
    sw      lr, F_LR(s16)
    lw      s24, F_D(s16)           # positions left along dim 0
    lw      s2, F_PTR(s16)
    sw      s2, F_RP(s16)
    lw      s2, F_PTR + 4(s16)
    sw      s2, F_RP + 4(s16)
    lw      s2, F_SR(s16)           # choose H or V
    lw      s3, F_ES(s16)
    bne     s2, s3, rd_group
    li      s2, AXIS_KIND
    li      s3, 2
    beq     s2, s3, rd_dense
    lw      s2, F_SR + 4(s16)
    lw      s3, F_ES + 4(s16)
    bne     s2, s3, rd_group
rd_dense:
    lw      s2, F_DR(s16)
    sltiu   s3, s2, H_MIN
    beqz    s3, rd_rows
    li      s2, 1                   # short rows: H only when there is one row
    bne     s19, s2, rd_group
    bne     s24, s2, rd_group
rd_rows:
    lw      s2, F_RP(s16)
    lw      s4, F_RP + 4(s16)
    lw      s5, F_DR(s16)
    lw      s6, F_DT(s16)
    lw      s7, F_DT + 4(s16)
    call    reduce_row
    lw      s2, F_RP(s16)
    lw      s3, F_S(s16)
    add     s2, s2, s3
    sw      s2, F_RP(s16)
    lw      s2, F_RP + 4(s16)
    lw      s3, F_S + 64(s16)
    add     s2, s2, s3
    sw      s2, F_RP + 4(s16)
    addi    s24, s24, -1
    bnez    s24, rd_rows
    j       rd_end
rd_group:
    li      s25, 4
    minu    s25, s25, s24           # lanes in this group
    lw      s2, F_RP(s16)
    lw      s3, F_S(s16)
    lw      s4, F_RP + 4(s16)
    lw      s10, F_S + 64(s16)
    lw      s5, F_DR(s16)
    lw      s8, F_SR(s16)
    lw      s9, F_SR + 4(s16)
    mov     s11, s25
    lw      s6, F_DT(s16)
    lw      s7, F_DT + 4(s16)
    call    reduce_group
    lw      s2, F_RP(s16)
    lw      s3, F_S(s16)
    slli    s3, s3, 2
    add     s2, s2, s3
    sw      s2, F_RP(s16)
    lw      s2, F_RP + 4(s16)
    lw      s3, F_S + 64(s16)
    slli    s3, s3, 2
    add     s2, s2, s3
    sw      s2, F_RP + 4(s16)
    sub     s24, s24, s25
    bnez    s24, rd_group
rd_end:
    lw      lr, F_LR(s16)
    ret
// ==== END SHARED: reduce row ====

// ---- reduce_mean: setup, rows, groups ----
// setup: f16 or f32 on each side
setup:
    li       s0, E_TYPE
    seqi     s2, s6, DT_F16
    seqi     s3, s6, DT_F32
    or       s2, s2, s3
    beqz     s2, k_setup_end
    seqi     s2, s7, DT_F16
    seqi     s3, s7, DT_F32
    or       s2, s2, s3
    beqz     s2, k_setup_end
    li       s0, 0
k_setup_end:
    ret

reduce_row:
    mov      s15, s5           # n
    vxor     v0, v0, v0
    vxor     v1, v1, v1
    li       s8, DT_F32
    beq      s6, s8, k_row32
k_row16:
    srli     s9, s5, 3
    andi     s10, s5, 7
    beqz     s9, k_row16_tail
k_row16_loop:
    vld      v2, 0(s2)
    addi     s2, s2, 16
    vcvtl.f32.f16 v3, v2
    vcvth.f32.f16 v4, v2
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
    loop     s9, k_row16_loop
k_row16_tail:
    vmask.h  m0, s10            # maybe no lanes: adds zeros
    vld.m    v2, 0(s2), m0
    vcvtl.f32.f16 v3, v2
    vcvth.f32.f16 v4, v2
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
    j        k_row_total
k_row32:
    srli     s9, s5, 3
    andi     s10, s5, 7
    beqz     s9, k_row32_tail
k_row32_loop:
    vld      v3, 0(s2)
    vld      v4, 16(s2)
    addi     s2, s2, 32
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
    loop     s9, k_row32_loop
k_row32_tail:
    vmask.w  m0, s10
    addi     s11, s10, -4
    li       s12, 0
    max      s11, s11, s12
    vmask.w  m1, s11
    vld.m    v3, 0(s2), m0
    vld.m    v4, 16(s2), m1
    vadd.f32 v0, v0, v3
    vadd.f32 v1, v1, v4
k_row_total:
    vadd.f32 v0, v0, v1
    vredsum.f32 s8, v0          # pairwise over the 4 lanes
    fcvt.f32.u32 s9, s15
    fdiv     s8, s8, s9           # mean = sum / n
    li       s9, DT_F32
    beq      s7, s9, k_row_store32
    fcvt.f16.f32 s8, s8
    sh       s8, 0(s4)
    ret
k_row_store32:
    sw       s8, 0(s4)
    ret

reduce_group:
    mov      s15, s5           # n
    vxor     v0, v0, v0
    li       s12, DT_F32
    beq      s6, s12, k_g32
k_g16:
    vmask.h  m0, s11
k_g16_loop:
    vlds.m.h v1, 0(s2), s3, m0
    add      s2, s2, s8
    vcvtl.f32.f16 v1, v1
    vadd.f32 v0, v0, v1
    loop     s5, k_g16_loop
    j        k_g_store
k_g32:
    vmask.w  m0, s11
k_g32_loop:
    vlds.m.w v1, 0(s2), s3, m0
    add      s2, s2, s8
    vadd.f32 v0, v0, v1
    loop     s5, k_g32_loop
k_g_store:
    fcvt.f32.u32 s12, s15
    vbcast.w v1, s12
    vdiv.f32 v0, v0, v1       # mean = sum / n
    li       s12, DT_F32
    beq      s7, s12, k_g_store32
    vcvt.f16.f32 v0, v0, v0
    vmask.h  m1, s11
    vsts.m.h v0, 0(s4), s10, m1
    ret
k_g_store32:
    vmask.w  m1, s11
    vsts.m.w v0, 0(s4), s10, m1
    ret
