"""Run one fuzz case through the ``vpuc`` CLI entry, in process, and classify the outcome.

Outcomes: ``ok`` (exit 0), ``error`` (exit 1, a located user error),
``usage`` (exit 2), ``internal`` (exit 3, a traceback, or any exception escaping
``main``), ``timeout`` (the case ran past its budget of CPU seconds: a SIGPROF stops it;
CPU time, not wall time, so that a loaded machine does not make hangs of slow cases)
and ``memory`` (a MemoryError under the address-space limit).  Everything but
``ok``, ``error`` and ``usage`` is a finding.

A ``Workspace`` is a directory holding what the seeds refer to (the conv
example's .npy files, the kernel includes, the assembly host program) and the
blobs of every example, compiled once, that blob cases corrupt.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import resource
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.mutate import (ASM_HOST, REPO, VIR_SEEDS, Mutant, asm_mutant, corrupt_blob,
                               vir_mutant)
from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.vir.parser import parse_text

FINDINGS = ("internal", "timeout", "memory")
# A valid program's compile time grows with the tasks it makes, so with its tensors: a case
# may take BUDGET + 1 CPU second per BYTES_PER_SECOND of its largest tensor (at most the
# target's address space, 4 GiB: 522 s).  A case past the base budget that ends cleanly
# is a slow case, reported apart; one past its own budget is a timeout.
BYTES_PER_SECOND = 8 << 20
LARGEST_COUNTED = 1 << 32
# Simulated cycles a corrupted blob may run for (the simulator has its own limits too).
MAX_CYCLES = "20000000"


class CaseTimeout(BaseException):
    """Raised by SIGPROF in the case that ran too long (BaseException: no handler eats it)."""


@dataclass
class Outcome:
    outcome: str
    exit_code: int | None
    seconds: float               # CPU seconds (user + system)
    stderr: str
    argv: list[str]


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        for name, target in (("conv_2tiles", REPO / "examples" / "conv_2tiles"),
                             ("include", REPO / "kernels" / "include")):
            link = root / name
            if not link.exists():
                link.symlink_to(target, target_is_directory=True)
        shutil.copy(ASM_HOST, root / "asm_host.vir")
        self.blobs: list[tuple[str, bytes]] = []
        with _quiet():
            for seed in VIR_SEEDS:
                for fmt in ("fb", "elf"):
                    out = root / f"seed.{fmt}"
                    if main(["compile", str(seed), "-o", str(out), "--format", fmt]) != 0:
                        raise RuntimeError(f"corpus file {seed} does not compile")
                    self.blobs.append((f"{seed.name}.{fmt}", out.read_bytes()))

    def blob_mutant(self, rng: random.Random) -> Mutant:
        name, blob = rng.choice(self.blobs)
        data, notes = corrupt_blob(blob, rng)
        return Mutant("blob", name, tuple(notes), data)

    def mutant(self, kind: str, rng: random.Random) -> Mutant:
        if kind == "vir":
            return vir_mutant(rng)
        if kind == "asm":
            return asm_mutant(rng)
        return self.blob_mutant(rng)

    def commands(self, mutant: Mutant) -> list[list[str]]:
        """Write the mutant's files; the command lines that run it."""
        root = self.root
        if mutant.kind == "vir":
            (root / "case.vir").write_bytes(mutant.data)
            return [["compile", str(root / "case.vir"), "-o", str(root / "case.blob")]]
        if mutant.kind == "asm":
            # The host program names its kernel file clamp_test.s.
            (root / "clamp_test.s").write_bytes(mutant.data)
            return [["compile", str(root / "asm_host.vir"), "-o", str(root / "case.blob")]]
        path = root / ("case.elf" if mutant.seed_name.endswith(".elf") else "case.blob")
        path.write_bytes(mutant.data)
        return [["inspect", str(path)],
                ["run", str(path), "--timing-only", "--max-cycles", MAX_CYCLES]]


def case_budget(mutant: Mutant, base: float) -> float:
    """CPU seconds ``mutant`` may take: ``base`` plus 1 s per 8 MiB of its largest tensor."""
    if mutant.kind != "vir":
        return base
    return base + min(largest_tensor_bytes(mutant.data), LARGEST_COUNTED) // BYTES_PER_SECOND


def largest_tensor_bytes(data: bytes) -> int:
    """The bytes of the largest buffer or graph value a .vir text declares; 0 if it does
    not parse."""
    try:
        with _quiet():
            module = parse_text(data.decode("utf-8"), "<budget>")
    except (VpucError, UnicodeDecodeError, RecursionError):
        return 0
    sizes = [b.type.nbytes for b in module.buffers]
    sizes += [op.type.nbytes for graph in module.graphs for op in graph.ops
              if op.type is not None]
    return max(sizes, default=0)


def case_rng(seed: int, kind: str, index: int) -> random.Random:
    """The generator of case ``index`` of ``kind``: a case is remade from (seed, kind, index)."""
    return random.Random(f"{seed}:{kind}:{index}")


def run_case(workspace: Workspace, mutant: Mutant, budget: float) -> Outcome:
    """Run the mutant's commands in turn (a later one only after exit 0); the first finding
    or the last outcome."""
    result = None
    for argv in workspace.commands(mutant):
        result = run_cli(argv, budget)
        if result.outcome != "ok":
            break
    return result


def run_cli(argv: list[str], budget: float) -> Outcome:
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace")
    previous = signal.signal(signal.SIGPROF, _alarm)
    started = time.process_time()
    code, outcome = None, None
    try:
        signal.setitimer(signal.ITIMER_PROF, budget)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(argv)
    except CaseTimeout:
        outcome = "timeout"
    except MemoryError:
        outcome = "memory"
    except SystemExit as exc:         # argparse: usage errors exit 2
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException as exc:      # noqa: BLE001 - anything escaping main is a finding
        outcome = "internal"
        print(f"escaped main: {type(exc).__name__}: {exc}", file=stderr)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    seconds = time.process_time() - started
    stderr.flush()
    text = stderr.buffer.getvalue().decode("utf-8", "replace")
    if outcome is None:
        if code == 3 or "Traceback" in text or "internal error" in text:
            outcome = "memory" if "MemoryError" in text else "internal"
        else:
            outcome = {0: "ok", 1: "error", 2: "usage"}.get(code, "internal")
    return Outcome(outcome, code, seconds, text, argv)


_LOCATED = re.compile(r"^\S.*?:(\d+:\d+|\s*section .* at offset 0x[0-9a-f]+): (error|warning)",
                      re.MULTILINE)


def unlocated_error(outcome: Outcome) -> str | None:
    """For a user error without a location (file:line:col, or blob section and offset),
    its first line; None otherwise."""
    if outcome.outcome != "error":
        return None
    first = next((line for line in outcome.stderr.splitlines() if "error" in line), "")
    return None if _LOCATED.match(first) else first


def _alarm(signum, frame):
    raise CaseTimeout()


@contextlib.contextmanager
def _quiet():
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        yield


@contextlib.contextmanager
def address_space_limit(extra_bytes: int):
    """Limit this process's address space to what it maps now plus ``extra_bytes``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = _mapped_bytes()
    limit = mapped + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * resource.getpagesize()


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
