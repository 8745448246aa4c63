"""THE instruction table of the ACT SHAVE vector ISA.

One row per instruction: mnemonic, opcode, operand format, functional unit and
a one-line description.  The assembler, the disassembler, the ISA reference in
``docs/shave-isa.md`` and the simulator's semantics and cycle tables are all
keyed by this table; nothing else lists instructions.

Operands are written in a fixed order per *format*.  Register operands are
encoded, in the order they are written, in the register fields r1..r4; the one
immediate-like operand (an integer, a float, a label, a symbol or the offset of
a memory operand) is encoded in the 32-bit ``imm`` field (see ``encoding.py``);
the operand kinds and formats are declared in ``isa_operands.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.shave.isa_operands import FORMAT_OPERANDS, Operand, format_placeholders

# --- the instruction table -------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    mnemonic: str
    opcode: int
    format: str
    unit: str                            # functional unit, keys the cycle table
    doc: str
    imm_range: tuple[int, int] | None = None   # narrower than 32 bits, if any

    @property
    def operands(self) -> tuple[Operand, ...]:
        return FORMAT_OPERANDS[self.format]

    @property
    def syntax(self) -> str:
        return f"{self.mnemonic} {format_placeholders(self.format)}".strip()


SIGNED_OR_UNSIGNED_32 = (-(1 << 31), (1 << 32) - 1)
SHIFT5 = (0, 31)
WIDTH = {"b": 1, "h": 2, "w": 4}           # element sizes of the .b/.h/.w suffixes

_rows: list[Instruction] = []


def _add(mnemonic: str, opcode: int, fmt: str, unit: str, doc: str,
         imm_range: tuple[int, int] | None = None) -> None:
    _rows.append(Instruction(mnemonic, opcode, fmt, unit, doc, imm_range))


# Control (0x001-0x00F, 0x0C0-0x0CF).  Opcode 0 is illegal, so zeroed memory traps.
_add("nop", 0x001, "N", "salu", "no operation")
_add("halt", 0x002, "N", "ctl", "end the kernel")

# Scalar integer ALU, register-register (0x010-0x02F).
for i, (name, unit, doc) in enumerate((
    ("add", "salu", "sd = sa + sb (mod 2^32)"),
    ("sub", "salu", "sd = sa - sb (mod 2^32)"),
    ("mul", "smul", "sd = low 32 bits of sa * sb"),
    ("mulh", "smul", "sd = high 32 bits of signed sa * sb"),
    ("mulhu", "smul", "sd = high 32 bits of unsigned sa * sb"),
    ("div", "sdiv", "sd = signed sa / sb, rounded toward zero; x/0 = -1, INT_MIN/-1 = INT_MIN"),
    ("divu", "sdiv", "sd = unsigned sa / sb; x/0 = 0xFFFFFFFF"),
    ("rem", "sdiv", "sd = signed sa % sb (sign of sa); x%0 = x, INT_MIN%-1 = 0"),
    ("remu", "sdiv", "sd = unsigned sa % sb; x%0 = x"),
    ("and", "salu", "sd = sa & sb"),
    ("or", "salu", "sd = sa | sb"),
    ("xor", "salu", "sd = sa ^ sb"),
    ("sll", "salu", "sd = sa << (sb & 31)"),
    ("srl", "salu", "sd = sa >> (sb & 31), logical"),
    ("sra", "salu", "sd = sa >> (sb & 31), arithmetic"),
    ("slt", "salu", "sd = 1 if signed sa < sb else 0"),
    ("sltu", "salu", "sd = 1 if unsigned sa < sb else 0"),
    ("seq", "salu", "sd = 1 if sa == sb else 0"),
    ("sne", "salu", "sd = 1 if sa != sb else 0"),
    ("min", "salu", "sd = signed minimum of sa, sb"),
    ("max", "salu", "sd = signed maximum of sa, sb"),
    ("minu", "salu", "sd = unsigned minimum of sa, sb"),
    ("maxu", "salu", "sd = unsigned maximum of sa, sb"),
)):
    _add(name, 0x010 + i, "S3", unit, doc)

# Scalar integer ALU with a 32-bit immediate (0x030-0x03F).
for i, (name, unit, doc, rng) in enumerate((
    ("addi", "salu", "sd = sa + imm", None),
    ("muli", "smul", "sd = low 32 bits of sa * imm", None),
    ("andi", "salu", "sd = sa & imm", None),
    ("ori", "salu", "sd = sa | imm", None),
    ("xori", "salu", "sd = sa ^ imm (xori sd, sa, -1 is bitwise not)", None),
    ("slli", "salu", "sd = sa << imm", SHIFT5),
    ("srli", "salu", "sd = sa >> imm, logical", SHIFT5),
    ("srai", "salu", "sd = sa >> imm, arithmetic", SHIFT5),
    ("slti", "salu", "sd = 1 if signed sa < imm else 0", None),
    ("sltiu", "salu", "sd = 1 if unsigned sa < imm else 0", None),
    ("seqi", "salu", "sd = 1 if sa == imm else 0", None),
    ("snei", "salu", "sd = 1 if sa != imm else 0", None),
)):
    _add(name, 0x030 + i, "S2I", unit, doc, rng)

# Moves and constants (0x040-0x04F).
_add("mov", 0x040, "S2", "salu", "sd = sa")
_add("li", 0x041, "SI", "salu", "sd = imm (any 32-bit constant in one instruction)")
_add("la", 0x042, "SSYM", "salu", "sd = address of symbol (+offset); relocated by the loader")
_add("li.f32", 0x043, "SF32", "salu", "sd = f32 bits of the float literal")
_add("li.f16", 0x044, "SF16", "salu", "sd = f16 bits of the float literal, zero-extended")

# Scalar f32 (0x050-0x06F): registers hold IEEE binary32 bit patterns.
for i, (name, fmt, unit, doc) in enumerate((
    ("fadd", "S3", "sfpu", "sd = sa + sb in f32"),
    ("fsub", "S3", "sfpu", "sd = sa - sb in f32"),
    ("fmul", "S3", "sfpu", "sd = sa * sb in f32"),
    ("fdiv", "S3", "sfdiv", "sd = sa / sb in f32"),
    ("fmin", "S3", "sfpu", "sd = minimum of sa, sb in f32 (NaN if either is NaN)"),
    ("fmax", "S3", "sfpu", "sd = maximum of sa, sb in f32 (NaN if either is NaN)"),
    ("feq", "S3", "sfpu", "sd = 1 if sa == sb in f32 else 0"),
    ("flt", "S3", "sfpu", "sd = 1 if sa < sb in f32 else 0"),
    ("fle", "S3", "sfpu", "sd = 1 if sa <= sb in f32 else 0"),
    ("fabs", "S2", "salu", "sd = |sa| in f32 (clears the sign bit)"),
    ("fneg", "S2", "salu", "sd = -sa in f32 (flips the sign bit)"),
    ("fsqrt", "S2", "sfdiv", "sd = sqrt(sa) in f32"),
    ("fcvt.f32.i32", "S2", "sfpu", "sd = f32(signed sa), round to nearest even"),
    ("fcvt.f32.u32", "S2", "sfpu", "sd = f32(unsigned sa), round to nearest even"),
    ("fcvt.i32.f32", "S2", "sfpu", "sd = int32(sa) rounded toward zero, saturating; NaN -> 0"),
    ("fcvt.f32.f16", "S2", "sfpu", "sd = f32 of the f16 in the low 16 bits of sa (exact)"),
    ("fcvt.f16.f32", "S2", "sfpu", "sd = f16 bits of f32 sa (round to nearest even), zero-extended"),
)):
    _add(name, 0x050 + i, fmt, unit, doc)

# Scalar memory (0x080-0x08F).  Addresses are sa + off; any alignment is allowed.
for i, (name, fmt, unit, doc) in enumerate((
    ("lb", "SLD", "sld", "sd = sign-extended byte at sa+off"),
    ("lbu", "SLD", "sld", "sd = zero-extended byte at sa+off"),
    ("lh", "SLD", "sld", "sd = sign-extended 16-bit word at sa+off"),
    ("lhu", "SLD", "sld", "sd = zero-extended 16-bit word at sa+off"),
    ("lw", "SLD", "sld", "sd = 32-bit word at sa+off"),
    ("ld", "SLD2", "sld", "sd = low, sd+1 = high 32 bits of the 64-bit word at sa+off (sd even)"),
    ("sb", "SST", "sst", "byte at sb+off = low 8 bits of sa"),
    ("sh", "SST", "sst", "16-bit word at sb+off = low 16 bits of sa"),
    ("sw", "SST", "sst", "32-bit word at sb+off = sa"),
    ("sd", "SST2", "sst", "64-bit word at sb+off = sa (low half), sa+1 (high half); sa even"),
)):
    _add(name, 0x080 + i, fmt, unit, doc)

# Control flow (0x0C0-0x0CF).  Labels are pc-relative to the branch itself.
for i, (name, fmt, unit, doc) in enumerate((
    ("beq", "B2", "branch", "branch if sa == sb"),
    ("bne", "B2", "branch", "branch if sa != sb"),
    ("blt", "B2", "branch", "branch if signed sa < sb"),
    ("bge", "B2", "branch", "branch if signed sa >= sb"),
    ("bltu", "B2", "branch", "branch if unsigned sa < sb"),
    ("bgeu", "B2", "branch", "branch if unsigned sa >= sb"),
    ("beqz", "B1", "branch", "branch if sa == 0"),
    ("bnez", "B1", "branch", "branch if sa != 0"),
    ("loop", "LOOP", "loop", "sa = sa - 1; branch if sa != 0 (zero-overhead counted loop)"),
    ("j", "J", "branch", "jump"),
    ("call", "J", "branch", "lr (s31) = address of the next instruction; jump"),
    ("ret", "N", "branch", "jump to lr (s31); returning to address 0 ends the kernel"),
)):
    _add(name, 0x0C0 + i, fmt, unit, doc)

# Vector memory (0x100-0x11F).  A vector is 16 bytes; lane i of an n-byte lane
# type occupies bytes [i*n, (i+1)*n), little-endian.
_add("vld", 0x100, "VLD", "vld", "vd = the 16 bytes at sa+off")
_add("vst", 0x101, "VST", "vst", "the 16 bytes at sa+off = va")
_add("vld.m", 0x102, "VLDM", "vld",
     "vd byte i = byte at sa+off+i if ma bit i else 0; inactive bytes are not accessed")
_add("vst.m", 0x103, "VSTM", "vst",
     "byte at sa+off+i = va byte i where ma bit i; inactive bytes are not accessed")
for j, w in enumerate("bhw"):
    n = 16 // WIDTH[w]
    _add(f"vlds.{w}", 0x104 + j, "VLDS", "vlds",
         f"vd lane i (of {n}) = the {WIDTH[w]}-byte element at sa+off+i*sb "
         "(sb: signed byte stride)")
    _add(f"vsts.{w}", 0x108 + j, "VSTS", "vsts",
         f"the {WIDTH[w]}-byte element at sa+off+i*sb = va lane i (of {n})")
    _add(f"vlds.m.{w}", 0x10C + j, "VLDSM", "vlds",
         f"as vlds.{w}, lanes whose mask bytes are clear read 0 and are not accessed")
    _add(f"vsts.m.{w}", 0x110 + j, "VSTSM", "vsts",
         f"as vsts.{w}, only lanes whose mask bytes are set are written")
    _add(f"vldb.{w}", 0x114 + j, "VLD", "vld",
         f"every {WIDTH[w]}-byte lane of vd = the element at sa+off (broadcast load)")

# Vector register moves (0x120-0x13F).
_add("vmov", 0x120, "V2", "valu", "vd = va")
_add("vsel", 0x121, "VSEL", "valu", "vd byte i = va byte i if ma bit i else vb byte i")
for j, w in enumerate("bhw"):
    lanes = 16 // WIDTH[w]
    _add(f"vbcast.{w}", 0x124 + j, "VBC", "valu",
         f"every {WIDTH[w]}-byte lane of vd = low {8 * WIDTH[w]} bits of sa")
    _add(f"vext.{w}", 0x128 + j, "SVI", "valu",
         f"sd = lane imm of va, zero-extended", (0, lanes - 1))
    _add(f"vins.{w}", 0x12C + j, "VINS", "valu",
         f"lane imm of vd = low {8 * WIDTH[w]} bits of sa; other lanes kept", (0, lanes - 1))

# Mask registers (0x140-0x14F): 16 bits, bit i governs byte i of a vector.
for j, w in enumerate("bhw"):
    lanes = 16 // WIDTH[w]
    _add(f"vmask.{w}", 0x140 + j, "MS", "valu",
         f"md = the bytes of the first min(sa, {lanes}) {WIDTH[w]}-byte lanes (sa unsigned)")
_add("mand", 0x144, "M3", "valu", "md = ma & mb")
_add("mor", 0x145, "M3", "valu", "md = ma | mb")
_add("mxor", 0x146, "M3", "valu", "md = ma ^ mb")
_add("mnot", 0x147, "M2", "valu", "md = ~ma")
_add("mset", 0x148, "MS", "valu", "md bit i = bit i of sa (i < 16)")
_add("mget", 0x149, "SM", "valu", "sd = the 16 mask bits of ma, zero-extended")

# Vector floating point: the same operations for f16 (0x200-) and f32 (0x280-).
_FLOAT_OPS = (
    ("vadd", "V3", "vfpu", "vd = va + vb"),
    ("vsub", "V3", "vfpu", "vd = va - vb"),
    ("vmul", "V3", "vfpu", "vd = va * vb"),
    ("vdiv", "V3", "vdiv", "vd = va / vb"),
    ("vmin", "V3", "vfpu", "vd = min(va, vb) (NaN if either is NaN)"),
    ("vmax", "V3", "vfpu", "vd = max(va, vb) (NaN if either is NaN)"),
    ("vfma", "V4", "vfma", "vd = va * vb + vc, evaluated in f64 then rounded to the lane type"),
    ("vabs", "V2", "valu", "vd = |va| (clears sign bits)"),
    ("vneg", "V2", "valu", "vd = -va (flips sign bits)"),
    ("vsqrt", "V2", "vdiv", "vd = sqrt(va)"),
    ("vcmpeq", "MVV", "vfpu", "md = bytes of lanes where va == vb"),
    ("vcmplt", "MVV", "vfpu", "md = bytes of lanes where va < vb"),
    ("vcmple", "MVV", "vfpu", "md = bytes of lanes where va <= vb"),
    ("vexp", "V2", "vsfu", "vd = exp(va)"),
    ("vlog", "V2", "vsfu", "vd = log(va) (natural)"),
    ("vtanh", "V2", "vsfu", "vd = tanh(va)"),
    ("vrcp", "V2", "vrcp", "vd = 1 / va"),
    ("vrsqrt", "V2", "vrcp", "vd = 1 / sqrt(va)"),
    ("vredsum", "SV", "vred", "sd = f32 bits of the sum of all lanes (pairwise tree, in f32)"),
    ("vredmax", "SV", "vred", "sd = f32 bits of the maximum lane"),
    ("vredmin", "SV", "vred", "sd = f32 bits of the minimum lane"),
)
for base, suffix in ((0x200, "f16"), (0x280, "f32")):
    for i, (name, fmt, unit, doc) in enumerate(_FLOAT_OPS):
        _add(f"{name}.{suffix}", base + i, fmt, unit, f"{doc}, {suffix} lanes")

# Vector integer (0x300-0x33F): wrap-around arithmetic.
for i, (name, fmt, unit, doc, rng) in enumerate((
    ("vadd.i8", "V3", "valu", "vd = va + vb, 16 x i8", None),
    ("vadd.i16", "V3", "valu", "vd = va + vb, 8 x i16", None),
    ("vadd.i32", "V3", "valu", "vd = va + vb, 4 x i32", None),
    ("vsub.i8", "V3", "valu", "vd = va - vb, 16 x i8", None),
    ("vsub.i16", "V3", "valu", "vd = va - vb, 8 x i16", None),
    ("vsub.i32", "V3", "valu", "vd = va - vb, 4 x i32", None),
    ("vmul.i16", "V3", "vfpu", "vd = low 16 bits of va * vb, 8 x i16", None),
    ("vmul.i32", "V3", "vfpu", "vd = low 32 bits of va * vb, 4 x i32", None),
    ("vmin.i32", "V3", "valu", "vd = signed min(va, vb), 4 x i32", None),
    ("vmax.i32", "V3", "valu", "vd = signed max(va, vb), 4 x i32", None),
    ("vmin.u8", "V3", "valu", "vd = unsigned min(va, vb), 16 x u8", None),
    ("vmax.u8", "V3", "valu", "vd = unsigned max(va, vb), 16 x u8", None),
    ("vand", "V3", "valu", "vd = va & vb", None),
    ("vor", "V3", "valu", "vd = va | vb", None),
    ("vxor", "V3", "valu", "vd = va ^ vb", None),
    ("vslli.i16", "V2I", "valu", "vd = va << imm, 8 x i16", (0, 15)),
    ("vslli.i32", "V2I", "valu", "vd = va << imm, 4 x i32", SHIFT5),
    ("vsrli.i16", "V2I", "valu", "vd = va >> imm logical, 8 x i16", (0, 15)),
    ("vsrli.i32", "V2I", "valu", "vd = va >> imm logical, 4 x i32", SHIFT5),
    ("vsrai.i16", "V2I", "valu", "vd = va >> imm arithmetic, 8 x i16", (0, 15)),
    ("vsrai.i32", "V2I", "valu", "vd = va >> imm arithmetic, 4 x i32", SHIFT5),
    ("vcmpeq.i32", "MVV", "valu", "md = bytes of lanes where va == vb, 4 x i32", None),
    ("vcmplt.i32", "MVV", "valu", "md = bytes of lanes where signed va < vb, 4 x i32", None),
    ("vredsum.i32", "SV", "vred", "sd = sum of the 4 i32 lanes (mod 2^32)", None),
)):
    _add(name, 0x300 + i, fmt, unit, doc, rng)

# Conversions (0x380-0x39F).  Widening ones take the low or high half of va.
for i, (name, fmt, doc) in enumerate((
    ("vcvtl.f32.f16", "V2", "vd.f32[i] = va.f16[i], i = 0..3 (exact)"),
    ("vcvth.f32.f16", "V2", "vd.f32[i] = va.f16[4+i], i = 0..3 (exact)"),
    ("vcvt.f16.f32", "V3", "vd.f16[i] = va.f32[i], vd.f16[4+i] = vb.f32[i] (round to nearest even)"),
    ("vcvtl.f32.bf16", "V2", "vd.f32[i] = va.bf16[i], i = 0..3 (exact)"),
    ("vcvth.f32.bf16", "V2", "vd.f32[i] = va.bf16[4+i], i = 0..3 (exact)"),
    ("vcvt.bf16.f32", "V3", "vd.bf16[i] = va.f32[i], vd.bf16[4+i] = vb.f32[i] (round to nearest even)"),
    ("vcvt.f32.i32", "V2", "vd.f32[i] = va.i32[i] (round to nearest even)"),
    ("vcvt.i32.f32", "V2", "vd.i32[i] = va.f32[i] rounded toward zero, saturating; NaN -> 0"),
    ("vcvtr.i32.f32", "V2", "vd.i32[i] = va.f32[i] rounded to nearest even, saturating; NaN -> 0"),
)):
    _add(name, 0x380 + i, fmt, "vcvt", doc)

INSTRUCTIONS: tuple[Instruction, ...] = tuple(_rows)
BY_MNEMONIC: dict[str, Instruction] = {ins.mnemonic: ins for ins in INSTRUCTIONS}
BY_OPCODE: dict[int, Instruction] = {ins.opcode: ins for ins in INSTRUCTIONS}
assert len(BY_MNEMONIC) == len(INSTRUCTIONS) == len(BY_OPCODE), "duplicate mnemonic or opcode"

# --- registers and ABI -----------------------------------------------------------

NUM_SREGS = 32
NUM_VREGS = 32
NUM_MREGS = 8
VECTOR_BYTES = 16
REGISTER_COUNTS = {"s": NUM_SREGS, "v": NUM_VREGS, "m": NUM_MREGS}
REG_ARGS_ADDR = 0           # s0 = argsAddr at kernel entry
REG_ARGS_SIZE = 1           # s1 = argsSize at kernel entry
REG_SP = 30                 # s30 = sp, 16-byte aligned, grows down
REG_LR = 31                 # s31 = lr, written by call
REGISTER_ALIASES = {"sp": ("s", REG_SP), "lr": ("s", REG_LR)}
EXIT_ADDRESS = 0            # lr at entry: `ret` to it ends the kernel
