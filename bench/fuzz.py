"""Long fuzz campaigns over the examples: mutated .vir files, mutated assembly kernels and
corrupted blobs, run through the ``vpuc`` CLI entry in worker processes.

Each case is made from (seed, kind, index) alone (``tests/fuzz/mutate.py``), so a
campaign can be split over processes and any case replayed.  A worker runs its
cases in process with a per-case budget of CPU seconds (SIGPROF; CPU time, so a
machine shared with other work does not turn slow cases into hangs) under an
address-space limit; a worker that does not answer within 6x the budget of wall
time is killed and the case counted as a hang.  The budget scales with the case:
``--budget`` plus 1 s per 8 MiB of the largest tensor a .vir declares
(``tests/fuzz/harness.py``, ``case_budget``), because compiling a valid program takes
time in proportion to the tasks it emits, and so to its tensors (a 1 GiB output of
``graph_conv`` is ~24,000 tasks).  Cases past ``--budget`` that end cleanly are
listed as ``slow_cases`` in report.json.  Findings (internal errors, timeouts, memory)
and user errors without a location are written to the output directory as reproducer
files (``OUTCOME-KIND-INDEX.vir|.s|.blob|.elf`` beside a ``.txt`` with the command and
the error; unlocated ones as ``unlocated-KIND-INDEX``).  The report: counts by outcome
per kind, the findings, the unlocated messages, the slowest case and the largest RSS a
worker reached.

    python bench/fuzz.py [--vir 100000] [--asm 0] [--blobs 10000] [--seed 1]
                         [--processes 1] [--budget 10] [--memory-gib 1] [--out fuzz-out]
    python bench/fuzz.py --replay vir:123 [--seed 1]    # remake one case and show its error
    python bench/fuzz.py --replay fuzz-out/ case.vir    # run reproducer files (dirs: all of them)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz.harness import (FINDINGS, Workspace, address_space_limit,  # noqa: E402
                                case_budget, case_rng, max_rss_bytes, run_case,
                                unlocated_error)
from tests.fuzz.mutate import Mutant  # noqa: E402

SUFFIX = {"vir": ".vir", "asm": ".s", "blob": ".blob"}
KIND_OF_SUFFIX = {".vir": "vir", ".s": "asm", ".blob": "blob", ".elf": "blob"}


def _worker(jobs, results, seed: int, budget: float, memory: int, root: str) -> None:
    workspace = Workspace(Path(root))
    with address_space_limit(memory):
        while True:
            job = jobs.get()
            if job is None:
                return
            kind, index = job
            mutant = workspace.mutant(kind, case_rng(seed, kind, index))
            allowed = case_budget(mutant, budget)
            results.put(("start", kind, index, os.getpid(), allowed))
            outcome = run_case(workspace, mutant, allowed)
            results.put(("done", kind, index, outcome.outcome, outcome.seconds, max_rss_bytes(),
                         outcome.stderr[-2000:], outcome.argv, unlocated_error(outcome),
                         allowed))


class Campaign:
    def __init__(self, args) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.counts: dict[str, Counter] = {}
        self.findings: list[dict] = []
        self.slowest = (0.0, "")
        self.max_rss = 0
        self.unlocated: Counter = Counter()      # user errors without a location, by message
        self.slow_cases: list[dict] = []         # past the base budget, within their own
        self.scratch = tempfile.TemporaryDirectory(prefix="vpuc-fuzz-")

    def run(self) -> dict:
        args = self.args
        cases = [(kind, i) for kind, n in (("vir", args.vir), ("asm", args.asm),
                                             ("blob", args.blobs)) for i in range(n)]
        ctx = mp.get_context("fork")
        jobs, results = ctx.Queue(), ctx.Queue()
        for case in cases:
            jobs.put(case)
        workers = {}
        for n in range(args.processes):
            self._start(ctx, workers, jobs, results, n)
        running: dict[int, tuple] = {}          # pid -> (kind, index, started)
        remaining, started_at, last_print = len(cases), time.time(), 0.0
        for sig in (signal.SIGTERM, signal.SIGINT):      # stop early: report what ran
            signal.signal(sig, _stop)
        while remaining and not _STOPPED:
            try:
                msg = results.get(timeout=1.0)
            except queue.Empty:
                msg = None
            if msg and msg[0] == "start":
                running[msg[3]] = (msg[1], msg[2], time.time(), msg[4])
            elif msg:
                _, kind, index, outcome, seconds, rss, stderr, argv, unlocated, allowed = msg
                self._record(kind, index, outcome, seconds, stderr, argv, unlocated)
                if outcome not in FINDINGS and seconds > args.budget:
                    self.slow_cases.append({"case": f"{kind}:{index}", "outcome": outcome,
                                            "cpu_seconds": round(seconds, 3),
                                            "budget_cpu_s": allowed})
                if unlocated is not None:
                    self.unlocated[re.sub(r"\d+", "N", unlocated)[:160]] += 1
                self.max_rss = max(self.max_rss, rss)
                running = {p: r for p, r in running.items() if r[:2] != (kind, index)}
                remaining -= 1
            for pid, (kind, index, t0, allowed) in list(running.items()):
                if time.time() - t0 > 6 * allowed + 10:      # SIGPROF could not stop it
                    n = next(k for k, w in workers.items() if w.pid == pid)
                    workers[n].kill()
                    workers[n].join()
                    del running[pid]
                    self._record(kind, index, "hang", time.time() - t0, "killed by the parent",
                                 [])
                    remaining -= 1
                    self._start(ctx, workers, jobs, results, n)
            if time.time() - last_print > 30:
                last_print = time.time()
                done = len(cases) - remaining
                print(f"[{time.time() - started_at:7.0f} s] {done}/{len(cases)} cases, "
                      f"{len(self.findings)} findings", file=sys.stderr, flush=True)
        interrupted = bool(_STOPPED)
        if interrupted:
            for w in workers.values():
                w.kill()
        for _ in workers:
            jobs.put(None)
        for w in workers.values():
            w.join(timeout=30)
        report = {"seed": args.seed, "budget_cpu_s": args.budget,
                  "memory_limit_gib": args.memory_gib,
                  "cases_run": len(cases) - remaining, "interrupted": interrupted,
                  "seconds": round(time.time() - started_at, 1),
                  "counts": {k: dict(c) for k, c in self.counts.items()},
                  "findings": len(self.findings),
                  "max_case_cpu_seconds": round(self.slowest[0], 3), "slowest_case": self.slowest[1],
                  "slow_cases": self.slow_cases,
                  "max_rss_mib": round(self.max_rss / 2**20, 1),
                  "errors_without_location": sum(self.unlocated.values()),
                  "unlocated_messages": dict(self.unlocated.most_common(15))}
        (self.out / "report.json").write_text(json.dumps(report | {"finding_list": self.findings},
                                                        indent=2))
        return report

    def _start(self, ctx, workers, jobs, results, n) -> None:
        root = os.path.join(self.scratch.name, f"w{n}-{len(workers)}-{time.time_ns()}")
        worker = ctx.Process(target=_worker, args=(jobs, results, self.args.seed, self.args.budget,
                                                   int(self.args.memory_gib * 2**30), root),
                             daemon=True)
        worker.start()
        workers[n] = worker

    def _record(self, kind, index, outcome, seconds, stderr, argv, unlocated=None) -> None:
        self.counts.setdefault(kind, Counter())[outcome] += 1
        name = f"{kind}:{index}"
        if seconds > self.slowest[0]:
            self.slowest = (seconds, name)
        if unlocated is not None:
            self._keep("unlocated", kind, index, argv, stderr)
        if outcome in FINDINGS or outcome == "hang":
            self._keep(outcome, kind, index, argv, stderr)
            self.findings.append({"case": name, "outcome": outcome,
                                  "seconds": round(seconds, 3),
                                  "error": stderr.strip().splitlines()[-1:] if stderr else []})
            print(f"FINDING {outcome} {name}: {stderr.strip()[-300:]}", file=sys.stderr,
                  flush=True)


    def _keep(self, prefix, kind, index, argv, stderr) -> None:
        """Write case ``kind:index`` as a reproducer file, with its command and error beside it."""
        stem = self.out / f"{prefix}-{kind}-{index}"
        mutant = _remake(kind, index, self.args.seed, self.scratch.name)
        suffix = ".elf" if mutant.seed_name.endswith(".elf") else SUFFIX[kind]
        stem.with_suffix(suffix).write_bytes(mutant.data)
        stem.with_suffix(".txt").write_text(f"case {kind}:{index} (seed {self.args.seed}) from "
                                            f"{mutant.seed_name}: {'; '.join(mutant.edits)}\n"
                                            f"command: vpuc {' '.join(argv)}\n{stderr}\n")


_STOPPED: list[int] = []


def _stop(signum, frame):
    _STOPPED.append(signum)


_REMAKE_WS: dict[str, Workspace] = {}


def _remake(kind: str, index: int, seed: int, scratch: str) -> Mutant:
    if scratch not in _REMAKE_WS:
        _REMAKE_WS[scratch] = Workspace(Path(scratch) / "remake")
    return _REMAKE_WS[scratch].mutant(kind, case_rng(seed, kind, index))


def replay_mutants(specs: list[str], seed: int, workspace: Workspace) -> list[Mutant]:
    """The cases ``specs`` name: KIND:INDEX (remade from --seed), reproducer files, or
    directories (every reproducer file in them)."""
    mutants = []
    for spec in specs:
        path = Path(spec)
        if re.fullmatch(r"(vir|asm|blob):\d+", spec) and not path.exists():
            kind, index = spec.split(":")
            mutants.append(workspace.mutant(kind, case_rng(seed, kind, int(index))))
            continue
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        for file in files:
            kind = KIND_OF_SUFFIX.get(file.suffix)
            if kind is None:
                if not path.is_dir():
                    raise SystemExit(f"--replay {spec}: not KIND:INDEX nor a reproducer file "
                                     f"({', '.join(KIND_OF_SUFFIX)})")
                continue
            mutants.append(Mutant(kind, file.name, (f"reproducer {file}",), file.read_bytes()))
    return mutants


def replay(specs: list[str], seed: int, budget: float) -> int:
    """Run each case and print its outcome; non-zero when any is a finding or unlocated."""
    bad = 0
    with tempfile.TemporaryDirectory(prefix="vpuc-fuzz-") as root:
        workspace = Workspace(Path(root))
        for mutant in replay_mutants(specs, seed, workspace):
            outcome = run_case(workspace, mutant, case_budget(mutant, budget))
            unlocated = unlocated_error(outcome)
            verdict = "unlocated error" if unlocated is not None else outcome.outcome
            bad += outcome.outcome in FINDINGS or unlocated is not None
            print(f"case {mutant.seed_name}: {'; '.join(mutant.edits)}\n"
                  f"vpuc {' '.join(outcome.argv)}\n-> {verdict} "
                  f"(exit {outcome.exit_code}, {outcome.seconds:.3f} s)\n{outcome.stderr}")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vir", type=int, default=100_000, help="mutated .vir files")
    parser.add_argument("--asm", type=int, default=0, help="mutated assembly kernels")
    parser.add_argument("--blobs", type=int, default=10_000, help="corrupted blobs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--budget", type=float, default=10.0, help="CPU seconds per case")
    parser.add_argument("--memory-gib", type=float, default=1.0,
                        help="address space a worker may map beyond its start")
    parser.add_argument("--out", default="fuzz-out", help="report.json and reproducers go here")
    parser.add_argument("--replay", metavar="CASE", nargs="+",
                        help="run these cases and print them: KIND:INDEX, reproducer files "
                             "or directories of them")
    args = parser.parse_args()
    if args.replay:
        return replay(args.replay, args.seed, args.budget)
    report = Campaign(args).run()
    print(json.dumps(report, indent=2))
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
