"""Mutants of the examples for fuzzing: token-level .vir and assembly edits, corrupted blobs.

Everything here is a pure function of a ``random.Random``, so a seed names a
campaign exactly and any mutant can be made again from (seed, index).  The
cases are what a user (or a broken tool) can hand vpuc: a .vir file with
tokens deleted, duplicated, swapped, numbers set to extremes, names made
undefined, text cut short or bytes that are not UTF-8; an assembly kernel
edited the same way; a blob with flipped, overwritten, removed or missing
bytes.  ``tests/fuzz/test_fuzz.py`` runs a few thousand of them in CI;
``bench/fuzz.py`` runs long campaigns.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A token: a comment, a string, a number (with dims like 1x16xf16 as one word),
# a %value / @symbol / name, one punctuation character, or a run of spaces.
_TOKEN = re.compile(r'//[^\n]*|#[^\n]*|"(?:[^"\\\n]|\\.)*"|(?:\d+|\?(?:<=\d+)?)(?:x(?:\d+|\?(?:<=\d+)?))*x[a-z]+\d+|[-+]?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*'
                    r'(?:[eE][-+]?\d+)?)|[%@$.]?[A-Za-z_][\w.$]*|\s+|.', re.DOTALL)
_NUMBER = re.compile(r'[-+]?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)$')

EXTREME_NUMBERS = ("0", "-1", "1", "-0.0", "65504", "65536", "2147483647", "2147483648",
                   "4294967296", "-2147483649", "9223372036854775808", "1048576",
                   "16777216", "0x7fffffff", "0xffffffff", "1e400", "-1e400", "1e-400",
                   "nan", "inf", "-inf", "3.5", "1" * 400, "1" * 5000, "0x" + "f" * 40)

VIR_SEEDS = sorted((REPO / "examples").glob("*.vir"))
ASM_HOST = REPO / "tests" / "unit" / "data" / "clamp_asm.vir"    # refers to clamp_test.s
ASM_SEEDS = [REPO / "tests" / "unit" / "data" / "clamp_test.s"] + sorted(
    (REPO / "kernels").glob("*.s"))


@dataclass(frozen=True)
class Mutant:
    kind: str            # "vir", "asm" or "blob"
    seed_name: str       # the file it was made from
    edits: tuple[str, ...]
    data: bytes


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def mutate_text(text: str, rng: random.Random, edits: int | None = None) -> tuple[str, list[str]]:
    """``text`` with 1-3 token-level edits; returns the text and a description of each."""
    toks = tokens(text)
    words = [i for i, t in enumerate(toks) if not t.isspace()]
    done = []
    for _ in range(edits or rng.choice((1, 1, 1, 2, 3))):
        if not words:
            break
        op = rng.choice(_TEXT_OPS)
        note = op(toks, words, rng)
        if note:
            done.append(note)
        words = [i for i, t in enumerate(toks) if t and not t.isspace()]
    return "".join(toks), done


def _delete(toks, words, rng):
    i = rng.choice(words)
    note, toks[i] = f"delete {toks[i][:30]!r}", ""
    return note


def _duplicate(toks, words, rng):
    i = rng.choice(words)
    toks[i] = toks[i] + " " + toks[i]
    return f"duplicate {toks[i][:30]!r}"


def _swap(toks, words, rng):
    k = rng.randrange(len(words))
    j = words[min(k + 1, len(words) - 1)] if rng.random() < 0.7 else rng.choice(words)
    i = words[k]
    toks[i], toks[j] = toks[j], toks[i]
    return f"swap {toks[i][:20]!r} and {toks[j][:20]!r}"


def _extreme_number(toks, words, rng):
    numbers = [i for i in words if _NUMBER.match(toks[i])]
    if not numbers:
        return _delete(toks, words, rng)
    i = rng.choice(numbers)
    old, toks[i] = toks[i], rng.choice(EXTREME_NUMBERS)
    return f"number {old!r} -> {toks[i][:20]!r}"


def _dims(toks, words, rng):
    """A shape like 1x64x128x128xf16 with one dim set to an extreme."""
    shaped = [i for i in words if re.match(r"^(\d+|\?)\S*x[a-z]+\d+$", toks[i])]
    if not shaped:
        return _extreme_number(toks, words, rng)
    i = rng.choice(shaped)
    parts = toks[i].split("x")
    k = rng.randrange(len(parts) - 1)
    parts[k] = rng.choice(("0", "1", "3", "1048576", "2147483648", "?", "65537", "99999999999"))
    old, toks[i] = toks[i], "x".join(parts)
    return f"dims {old!r} -> {toks[i]!r}"


def _rename(toks, words, rng):
    names = [i for i in words if toks[i][:1] in "%@" and len(toks[i]) > 1]
    if not names:
        return _delete(toks, words, rng)
    i = rng.choice(names)
    old = toks[i]
    others = sorted({toks[j] for j in names if toks[j][0] == old[0] and toks[j] != old})
    toks[i] = (rng.choice(others) if others and rng.random() < 0.5
               else old[0] + rng.choice(("undefined", old[1:] + "x", "0", "x" * 300)))
    return f"name {old!r} -> {toks[i][:30]!r}"


def _word(toks, words, rng):
    """A keyword or name replaced by another word of the file (a wrong keyword)."""
    names = [i for i in words if re.match(r"^[A-Za-z_]", toks[i])]
    if not names:
        return _delete(toks, words, rng)
    i, j = rng.choice(names), rng.choice(names)
    old, toks[i] = toks[i], toks[j]
    return f"word {old!r} -> {toks[i]!r}"


def _insert(toks, words, rng):
    i, j = rng.choice(words), rng.choice(words)
    toks[i] = toks[j] + " " + toks[i]
    return f"insert {toks[j][:30]!r}"


def _truncate(toks, words, rng):
    i = rng.choice(words)
    cut = rng.randrange(len(toks[i]) + 1)
    for k in range(i + 1, len(toks)):
        toks[k] = ""
    toks[i] = toks[i][:cut]
    return f"truncate at token {i}"


def _repeat_line(toks, words, rng):
    """One statement many times (large repetition counts stress every limit)."""
    text = "".join(toks)
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    lines[k] = "\n".join([lines[k]] * rng.choice((2, 50, 2000)))
    toks[:] = tokens("\n".join(lines))
    return f"repeat line {k + 1}"


_TEXT_OPS = (_delete, _delete, _duplicate, _swap, _extreme_number, _extreme_number, _dims,
             _rename, _rename, _word, _insert, _truncate, _repeat_line)


def to_bytes(text: str, rng: random.Random) -> tuple[bytes, list[str]]:
    """The text as UTF-8; one case in 50 gets a byte that is not UTF-8."""
    data = text.encode("utf-8")
    if data and rng.random() < 0.02:
        i = rng.randrange(len(data))
        return data[:i] + bytes([rng.choice((0x80, 0xC3, 0xFF, 0xFE))]) + data[i:], \
            [f"non-UTF-8 byte at {i}"]
    return data, []


def vir_mutant(rng: random.Random) -> Mutant:
    seed = rng.choice(VIR_SEEDS)
    text, notes = mutate_text(seed.read_text(encoding="utf-8"), rng)
    data, more = to_bytes(text, rng)
    return Mutant("vir", seed.name, tuple(notes + more), data)


def asm_mutant(rng: random.Random) -> Mutant:
    seed = rng.choice(ASM_SEEDS)
    text, notes = mutate_text(seed.read_text(encoding="utf-8"), rng)
    data, more = to_bytes(text, rng)
    return Mutant("asm", seed.name, tuple(notes + more), data)


def corrupt_blob(blob: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """``blob`` with 1-4 of: flipped bits, words set to extremes, cuts, removed or
    inserted ranges."""
    data = bytearray(blob)
    notes = []
    for _ in range(rng.choice((1, 1, 2, 4))):
        if not data:
            break
        op = rng.randrange(6)
        i = rng.randrange(len(data))
        if op == 0:
            data[i] ^= 1 << rng.randrange(8)
            notes.append(f"flip bit at {i}")
        elif op == 1:
            word = rng.choice((0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 1, len(data),
                               len(data) + 1, rng.getrandbits(32)))
            data[i:i + 4] = word.to_bytes(4, "little")
            notes.append(f"word {word:#x} at {i}")
        elif op == 2:
            del data[i:]
            notes.append(f"truncate to {i}")
        elif op == 3:
            n = rng.choice((1, 4, 16, 256))
            del data[i:i + n]
            notes.append(f"remove {n} bytes at {i}")
        elif op == 4:
            n = rng.choice((1, 4, 16))
            data[i:i] = bytes(rng.getrandbits(8) for _ in range(n))
            notes.append(f"insert {n} bytes at {i}")
        else:
            n = rng.choice((8, 64))
            data[i:i + n] = bytes(rng.getrandbits(8) for _ in range(min(n, len(data) - i)))
            notes.append(f"randomize {n} bytes at {i}")
    return bytes(data), notes
