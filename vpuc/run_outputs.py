"""What ``vpuc run`` writes besides the summary: ``--output`` files (IREE's
``[NAME=]@FILE.npy``), text outputs that may go to stdout (``-``), and the
``--json`` object (its fields: docs/simulator.md, "vpuc run --json")."""

from __future__ import annotations

import json
import sys

from runtime_sim.report import summary_data
from vpuc.diagnostics import UsageError
from vpuc.fileio import write_atomically

EXIT_OK = 0
RUN_JSON_SCHEMA, RUN_JSON_VERSION = "vpuc-run", 1      # bump the version on any change


def write_output(path: str, text: str) -> None:
    """A text output of the run: the file atomically, or stdout for ``-``."""
    if path == "-":
        sys.stdout.write(text)
    else:
        write_atomically(path, text.encode())


def output_files(specs: list[str], names: list[str]) -> dict[str, str]:
    """``--output [NAME=]@FILE.npy`` (IREE's spelling) → path by output name."""
    files: dict[str, str] = {}
    free = iter([n for n in names])
    for spec in specs:
        head, sep, rest = spec.partition("=")
        name, value = (head.lstrip("%"), rest) if sep and not spec.startswith("@") else (None, spec)
        if not value.startswith("@") or len(value) < 2:
            raise UsageError(f"--output {spec}: expected @FILE.npy or NAME=@FILE.npy")
        if name is None:
            name = next((n for n in free if n not in files), None)
            if name is None:
                raise UsageError(f"--output {spec}: more --output files than the program's "
                                 f"{len(names)} output(s)")
        elif name not in names:
            listed = ", ".join(f"%{n}" for n in names) or "none"
            raise UsageError(f"--output {spec}: the program has no output %{name}; its "
                             f"outputs are {listed}")
        if name in files:
            raise UsageError(f"--output: output %{name} is given twice")
        files[name] = value[1:]
    return files


def run_json(args, program, arch, timing_model: str, run, written, verdicts,
             status: int) -> str:
    """``vpuc run --json``: one object, the fields documented in docs/simulator.md."""
    result, check = run.result, run.kernel_check
    data = {"schema": RUN_JSON_SCHEMA, "version": RUN_JSON_VERSION,
            "file": args.file, "program": program.module.name,
            "provenance": dict(program.provenance),
            "arch": arch.name, "timing_model": timing_model,
            "timing_model_version": arch.version}
    data.update(summary_data(result.plan, result.timeline))
    data["races"] = [d.render() for d in result.races]
    data["outputs_written"] = {name: path for name, path in written}
    data["checks"] = verdicts
    data["kernel_check"] = None if check is None else {
        "tasks_checked": check.checked, "kernels": sorted(check.kernels_run),
        "mismatches": [m.render() for m in check.mismatches], "summary": check.summary()}
    layers = getattr(run, "layer_check", None)
    data["layer_check"] = None if layers is None else layers.as_dict()
    data["ok"] = status == EXIT_OK
    return json.dumps(data, indent=1, sort_keys=False) + "\n"
