"""A sweep spec: a TOML file read into a checked ``SweepSpec``, every error located.

    [sweep]
    arch = "NPU37XX"                 # the base architecture (default)
    sampler = "grid"                 # grid | random | latin-hypercube
    samples = 16                     # random and latin-hypercube
    seed = 0
    cost = "cmx_bytes * tiles"       # the cost proxy: arithmetic over parameters
    metrics = ["cycles", "time_us"]  # default: all of METRICS
    numerics = false                 # true: simulate with numerics, not timing only
    compile_timing = false           # true: compile with each point's timing model too

    [[models]]
    path = "net.onnx"                # .vir, .onnx or a blob; relative to the spec
    name = "net"                     # default: the file's stem
    input_shapes = { x = [1, 3, 32, 32] }

    [parameters]
    tiles = [1, 2]                               # values
    ddr_bandwidth_mbps = { min = 15600, max = 31200, steps = 3 }   # a range

tomllib gives no positions, so ``_Locator`` finds a key's line in the text by its
table header and its ``key =``; a TOML syntax error keeps tomllib's own line and column.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from vpuc.diagnostics import Loc, VpucError, closest_name
from vpuc.sweep.params import PARAMS, compile_api_takes

SAMPLERS = ("grid", "random", "latin-hypercube")
METRICS = ("cycles", "time_us", "dpu_busy_percent", "act_shave_busy_percent",
           "dma_busy_percent", "ddr_bytes", "dma_bytes", "peak_cmx_bytes", "barrier_count",
           "blob_bytes", "dpu_task_count")
MODEL_SUFFIXES = (".vir", ".onnx", ".blob", ".elf")
SWEEP_KEYS = ("arch", "sampler", "samples", "seed", "cost", "metrics", "numerics",
              "compile_timing")
MODEL_KEYS = ("path", "name", "input_shapes")
COST_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd)


@dataclass(frozen=True)
class Model:
    name: str
    path: Path                       # absolute
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Axis:
    """One parameter's domain: listed ``values``, or a range ``low..high`` (``steps`` for
    a grid)."""

    name: str
    values: tuple = ()
    low: float | None = None
    high: float | None = None
    steps: int | None = None

    def grid(self) -> tuple:
        if self.values:
            return self.values
        if self.steps == 1:
            return (self._typed(self.low),)
        step = (self.high - self.low) / (self.steps - 1)
        return tuple(dict.fromkeys(self._typed(self.low + i * step) for i in range(self.steps)))

    def at(self, u: float):
        """The value at ``u`` in [0, 1): a listed value by index, or a point of the range."""
        if self.values:
            return self.values[min(int(u * len(self.values)), len(self.values) - 1)]
        return self._typed(self.low + u * (self.high - self.low))

    def _typed(self, x: float):
        return int(round(x)) if PARAMS[self.name].type is int else float(x)


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    arch: str
    sampler: str
    samples: int | None
    seed: int
    cost: str
    metrics: tuple[str, ...]
    numerics: bool
    models: tuple[Model, ...]
    axes: tuple[Axis, ...]
    compile_timing: bool = False     # the compiler sees each point's timing model too


class _Locator:
    """Line and column of a key in the spec's text, by table header and ``key =``."""

    HEADER = re.compile(r"^\s*\[(\[)?\s*([A-Za-z0-9_.\-\" ]+?)\s*\]\]?\s*(#.*)?$")

    def __init__(self, name: str, text: str) -> None:
        self.name, self.lines = name, text.splitlines()

    def loc(self, table: str | None = None, key: str | None = None, index: int = 0) -> Loc:
        """The position of ``key`` in ``table`` (its ``index``-th ``[[table]]`` for arrays),
        else of the table's header, else the file's start."""
        current, seen, header = None, -1, None
        for n, line in enumerate(self.lines, 1):
            m = self.HEADER.match(line)
            if m:
                current = m.group(2).replace(" ", "")
                if current == table:
                    seen += 1
                    if seen == index:
                        header = Loc(self.name, n, line.index("[") + 1)
                continue
            if key is not None and current == table and seen == index:
                k = re.match(rf"^(\s*){re.escape(key)}\s*=", line)
                if k:
                    return Loc(self.name, n, len(k.group(1)) + 1)
        return header or Loc(self.name, 1, 1)

    def error(self, message: str, table: str | None = None, key: str | None = None,
              index: int = 0) -> VpucError:
        return VpucError(message, self.loc(table, key, index))


def _did_you_mean(name: str, known) -> str:
    hint = closest_name(name, list(known))
    return f"; did you mean '{hint}'?" if hint else f"; expected one of: {', '.join(known)}"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check the spec at ``path``; a VpucError located in it for anything wrong."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise VpucError(f"cannot read the sweep spec {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        from vpuc.fileio import not_utf8
        raise not_utf8(str(path), exc, "TOML") from None
    return parse_spec(text, path)


def parse_spec(text: str, path: Path) -> SweepSpec:
    where = _Locator(str(path), text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        loc = Loc(str(path), int(m.group(1)), int(m.group(2))) if m else Loc(str(path), 1, 1)
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise VpucError(f"malformed TOML: {message}", loc) from None
    for key in data:
        if key not in ("sweep", "models", "parameters"):
            tables = ["sweep", "models", "parameters"]
            raise where.error(f"unknown table '{key}'{_did_you_mean(key, tables)}",
                              key if isinstance(data[key], dict) else None,
                              None if isinstance(data[key], dict) else key)
    sweep = data.get("sweep", {})
    if not isinstance(sweep, dict):
        raise where.error("'sweep' must be a table", None, "sweep")
    for key in sweep:
        if key not in SWEEP_KEYS:
            raise where.error(f"unknown key '{key}' in [sweep]{_did_you_mean(key, SWEEP_KEYS)}",
                              "sweep", key)
    models = _models(data, where, path.parent)
    axes = _axes(data, where)
    sampler = sweep.get("sampler", "grid")
    if sampler not in SAMPLERS:
        raise where.error(f"unknown sampler {sampler!r}{_did_you_mean(str(sampler), SAMPLERS)}",
                          "sweep", "sampler")
    samples = sweep.get("samples")
    if sampler == "grid":
        if samples is not None:
            raise where.error("'samples' is for the random and latin-hypercube samplers; a grid "
                              "takes every combination", "sweep", "samples")
        for axis in axes:
            if not axis.values and axis.steps is None:
                raise where.error(f"parameter '{axis.name}' is a range without 'steps'; a grid "
                                  "needs listed values or steps", "parameters", axis.name)
    elif not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise where.error(f"the {sampler} sampler needs 'samples', a positive integer",
                          "sweep", "samples" if "samples" in sweep else None)
    seed = sweep.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise where.error("'seed' must be a non-negative integer", "sweep", "seed")
    arch = sweep.get("arch", "NPU37XX")
    try:
        from vpuc.sweep.params import base_values
        base = base_values(str(arch))
    except VpucError as exc:
        raise where.error(exc.diagnostics[0].message, "sweep", "arch") from None
    cost = sweep.get("cost", "1")
    if not isinstance(cost, str):
        raise where.error("'cost' must be a string: an expression over parameters", "sweep",
                          "cost")
    check_cost(cost, base, where)
    metrics = sweep.get("metrics", list(METRICS))
    if not isinstance(metrics, list) or not metrics:
        raise where.error("'metrics' must be a non-empty list of metric names", "sweep",
                          "metrics")
    for m in metrics:
        if m not in METRICS:
            raise where.error(f"unknown metric {m!r}{_did_you_mean(str(m), METRICS)}", "sweep",
                              "metrics")
    numerics = sweep.get("numerics", False)
    if not isinstance(numerics, bool):
        raise where.error("'numerics' must be true or false", "sweep", "numerics")
    compile_timing = sweep.get("compile_timing", False)
    if not isinstance(compile_timing, bool):
        raise where.error("'compile_timing' must be true or false", "sweep", "compile_timing")
    if compile_timing and not compile_api_takes("timing"):
        raise where.error("'compile_timing': this vpuc's compile API takes no timing model",
                          "sweep", "compile_timing")
    return SweepSpec(path.resolve(), str(arch), sampler, samples, seed, cost,
                     tuple(dict.fromkeys(metrics)), numerics, models, axes, compile_timing)


def _models(data: dict, where: _Locator, base: Path) -> tuple[Model, ...]:
    entries = data.get("models")
    if not isinstance(entries, list) or not entries or \
            not all(isinstance(e, dict) for e in entries):
        raise where.error("the spec needs at least one [[models]] table with a 'path'", "models")
    models, names = [], set()
    for i, entry in enumerate(entries):
        for key in entry:
            if key not in MODEL_KEYS:
                raise where.error(f"unknown key '{key}' in [[models]]"
                                  f"{_did_you_mean(key, MODEL_KEYS)}",
                                  "models", key, i)
        if not isinstance(entry.get("path"), str):
            raise where.error("a model needs 'path', a string", "models", "path", i)
        file = (base / entry["path"]).resolve()
        if file.suffix not in MODEL_SUFFIXES:
            raise where.error(f"model {entry['path']!r}: expected a {', '.join(MODEL_SUFFIXES)} "
                              "file", "models", "path", i)
        if not file.is_file():
            raise where.error(f"model {entry['path']!r}: no such file (paths are relative to "
                              "the spec's directory)", "models", "path", i)
        name = entry.get("name", file.stem)
        if not isinstance(name, str) or not name:
            raise where.error("a model's 'name' must be a non-empty string", "models", "name", i)
        if name in names:
            raise where.error(f"two models are named {name!r}; give one a 'name'", "models",
                              "name" if "name" in entry else "path", i)
        names.add(name)
        shapes = entry.get("input_shapes", {})
        if not isinstance(shapes, dict) or not all(
                isinstance(v, list) and v and all(isinstance(d, int) and not isinstance(d, bool)
                                                  and d > 0 for d in v) for v in shapes.values()):
            raise where.error("'input_shapes' must map input names to lists of positive "
                              "integers", "models", "input_shapes", i)
        if shapes and file.suffix != ".onnx":
            raise where.error("'input_shapes' applies to .onnx models only", "models",
                              "input_shapes", i)
        models.append(Model(name, file, {k: tuple(v) for k, v in shapes.items()}))
    return tuple(models)


def _axes(data: dict, where: _Locator) -> tuple[Axis, ...]:
    table = data.get("parameters", {})
    if not isinstance(table, dict):
        raise where.error("'parameters' must be a table", None, "parameters")
    axes = []
    for name, value in table.items():
        if name not in PARAMS:
            raise where.error(f"unknown parameter '{name}'{_did_you_mean(name, PARAMS)}",
                              "parameters", name)
        p = PARAMS[name]
        if p.kind == "compile" and not compile_api_takes(p.key):
            raise where.error(f"parameter '{name}': this vpuc's compile API takes no "
                              f"'{p.key}' option", "parameters", name)
        def fail(why: str, name: str = name) -> VpucError:
            return where.error(f"parameter '{name}': {why}", "parameters", name)
        if isinstance(value, list):
            axes.append(Axis(name, tuple(_checked_value(p, v, fail) for v in value)))
            if not value:
                raise fail("an empty list of values")
            if len(set(value)) != len(value):
                raise fail("a value is listed twice")
        elif isinstance(value, dict):
            if p.type is str:
                raise fail("a range needs a numeric parameter; list the values")
            extra = set(value) - {"min", "max", "steps"}
            if extra or not _number(value.get("min")) or not _number(value.get("max")):
                raise fail("a range is { min = A, max = B } with an optional steps = N")
            low, high = _checked_value(p, value["min"], fail), _checked_value(p, value["max"], fail)
            if low > high:
                raise fail(f"min {low} is above max {high}")
            steps = value.get("steps")
            if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)
                                      or steps < 1):
                raise fail("'steps' must be a positive integer")
            axes.append(Axis(name, low=low, high=high, steps=steps))
        else:
            raise fail("expected a list of values or a range { min = A, max = B }")
    return tuple(axes)


def _checked_value(p, v, fail):
    if p.type is str:
        if not isinstance(v, str):
            raise fail(f"{v!r} is not a string")
        if p.choices and v not in p.choices:
            raise fail(f"{v!r} is not one of {', '.join(p.choices)}")
        return v
    if not _number(v) or (p.type is int and not isinstance(v, int)):
        raise fail(f"{v!r} is not {'an integer' if p.type is int else 'a number'}")
    if p.minimum is not None and v < p.minimum:
        raise fail(f"{v} is below the least value {p.minimum:g}")
    return p.type(v)


def check_cost(expr: str, names: dict, where: _Locator) -> None:
    """A cost proxy is arithmetic (+ - * / **) over numbers and numeric parameters."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise where.error(f"cost {expr!r} is not an expression: {exc.msg}", "sweep",
                          "cost") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in names:
            raise where.error(f"cost {expr!r}: unknown parameter '{node.id}'"
                              f"{_did_you_mean(node.id, names)}", "sweep", "cost")
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load,
                                 ast.Constant, *COST_OPS)) or (
                isinstance(node, ast.Constant) and not _number(node.value)):
            raise where.error(f"cost {expr!r}: only numbers, parameter names and + - * / ** "
                              "are allowed", "sweep", "cost")


def eval_cost(expr: str, values: dict) -> float:
    """The cost proxy's value at a point (``values``: every numeric parameter)."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            return float(values[node.id])
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
        a, b = ev(node.left), ev(node.right)
        if isinstance(node.op, ast.Div):
            return a / b if b else float("inf")
        if isinstance(node.op, ast.Pow):
            return a ** b
        return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) \
            else a * b
    return ev(ast.parse(expr, mode="eval"))
