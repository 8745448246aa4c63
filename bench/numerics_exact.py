"""Numerics kept exactly: the outputs and cycles of a simulation with numerics, saved from
one tree and compared bit for bit in another (issue 11, section 5: a faster numerics path
must compute exactly what the old one did).

Programs: the zoo models of ``bench/model_bench.py`` (ResNet-18, MobileNetV3-Small, the
encoder layer, at full size) and the FPN block, plus every ``examples/*.vir``.  Each is
simulated with numerics, races on, the inputs drawn from the default seed; saved are
every output array (as raw bytes with dtype and shape), the cycles, and a digest of each of
the network's memories (DDR buffers, the scratch area, each tile's CMX) at the end: every
byte any engine left, not only the outputs; and of each value the layer check reads as a
DMA left it in CMX (``Network.kept``).

    python bench/numerics_exact.py save DIR [--only NAME ...]   # in the reference tree
    python bench/numerics_exact.py check DIR [--only NAME ...]  # in the changed tree

``check`` exits 1 and names every output whose bytes, dtype or shape differ, or whose
cycles differ.  Compiled blobs are cached per tree under DIR/blobs-<tree digest>, so a
second run of either tree only simulates.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ZOO = {"resnet18": {"size": 224}, "mobilenet_v3_small": {"size": 224},
       "encoder_layer": {"seq": 197, "width": 192, "heads": 3}, "fpn_block": {"size": 32}}


def names() -> list[str]:
    return list(ZOO) + sorted(p.stem for p in (ROOT / "examples").glob("*.vir"))


def program_of(name: str, cache: Path):
    """The compiled program of ``name``, from this tree's blob cache when there."""
    from vpuc.api import compile, read_blob, write_blob
    blob = cache / f"{name}.blob"
    if blob.exists():
        return read_blob(blob)
    if name in ZOO:
        from vpuc.onnx_import import zoo
        with tempfile.TemporaryDirectory(prefix="vpuc-exact-") as folder:
            path = str(Path(folder) / f"{name}.onnx")
            zoo.ZOO[name](seed=0, **ZOO[name]).save(path, name)
            program = compile(path)
    else:
        program = compile(ROOT / "examples" / f"{name}.vir")
    cache.mkdir(parents=True, exist_ok=True)
    write_blob(program, "fb", blob)
    return read_blob(blob)


def run(name: str, cache: Path) -> tuple[dict[str, np.ndarray], float, dict[str, str]]:
    from vpuc.api import simulate
    result = simulate(program_of(name, cache))
    network = result.result.network
    memories = {"/".join(map(str, key)): hashlib.sha256(array.tobytes()).hexdigest()
                for key, array in network.memory.arrays.items()}
    memories.update({f"kept %{name}": hashlib.sha256(np.ascontiguousarray(value).tobytes()
                                                     + str(value.shape).encode()).hexdigest()
                     for name, value in network.kept.items()})
    return {k: np.asarray(v) for k, v in result.outputs.items()}, result.cycles, memories


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "check"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    cache = args.dir / f"blobs-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"
    bad = 0
    for name in args.only or names():
        outputs, cycles, memories = run(name, cache)
        saved = args.dir / name
        if args.action == "save":
            saved.mkdir(parents=True, exist_ok=True)
            meta = {"cycles": cycles, "outputs": {}, "memories": memories}
            for key, value in outputs.items():
                (saved / f"{key}.bin").write_bytes(np.ascontiguousarray(value).tobytes())
                meta["outputs"][key] = [str(value.dtype), list(value.shape)]
            (saved / "meta.json").write_text(json.dumps(meta))
            print(f"{name}: saved {len(outputs)} outputs, {cycles:,.1f} cycles")
            continue
        meta = json.loads((saved / "meta.json").read_text())
        problems = []
        if meta["cycles"] != cycles:
            problems.append(f"cycles {cycles!r} != {meta['cycles']!r}")
        if set(meta["outputs"]) != set(outputs):
            problems.append(f"outputs {sorted(outputs)} != {sorted(meta['outputs'])}")
        changed = [key for key in sorted(set(memories) | set(meta["memories"]))
                   if memories.get(key) != meta["memories"].get(key)]
        if changed:
            problems.append(f"memory or kept values differ in {', '.join(changed)}")
        for key, (dtype, shape) in meta["outputs"].items():
            value = outputs.get(key)
            if value is None:
                continue
            if str(value.dtype) != dtype or list(value.shape) != shape:
                problems.append(f"%{key} is {value.dtype} {value.shape}, was {dtype} {shape}")
            elif np.ascontiguousarray(value).tobytes() != (saved / f"{key}.bin").read_bytes():
                problems.append(f"%{key}: bytes differ")
        bad += bool(problems)
        print(f"{name}: " + ("; ".join(problems) if problems else
                             f"{len(outputs)} outputs and {len(memories)} memories and kept values "
                             "bit-identical, "
                             f"{cycles:,.1f} cycles"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
