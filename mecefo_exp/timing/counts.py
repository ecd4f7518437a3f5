"""FLOP counts and model shapes, counted once and cached in .cache/flops/ (no torch here).

A count runs the kernels under torch's FLOP counter on a meta-device model (flops.py); it is a
pure function of the shape, the dtype, the kernels, the installed torch and the code it runs
through, which together key the cache. A run whose counts are cached builds no model at all.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, TypeVar

from ..paths import default_cache_dir

log = logging.getLogger(__name__)
T = TypeVar("T")


def cached_counts(key: Dict, count: Callable[[], T]) -> T:
    """FLOP counts are a pure function of shape, dtype, kernels and torch version: counted once,
    kept in .cache/flops/ (a sweep of 400 numerics-free runs then counts each shape once)."""
    import hashlib
    import json

    from filelock import FileLock

    key = dict(key, torch=_version("torch"), code=_counting_code_hash())
    folder = default_cache_dir() / "flops"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16] + ".json")
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return json.loads(path.read_text())["counts"]
        log.info(
            "counting the FLOPs of %s on the meta device (once per shape, ~1-2 s for the tiny model on 2 "
            "cores, longer for larger shapes); cached in %s",
            key.get("model", {}).get("name", "the model"),
            folder,
        )
        t0 = time.perf_counter()
        counts = count()
        log.info("FLOPs counted in %.1f s", time.perf_counter() - t0)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "counts": counts}, indent=1, default=str))
        tmp.replace(path)
    return counts


#: where a FLOP count starts: the counting itself, the kernels it runs, the model, and every
#: method file (methods bring kernels of their own: MeCeFO's neighbour pair, Bamboo's forward)
COUNTING_ROOTS = ("timing/__init__.py", "timing/flops.py", "timing/kernels.py", "numerics/model.py", "methods/*.py")


def counting_sources(package_root: Optional[Path] = None) -> List[str]:
    """The package's source files a FLOP count can run through: the roots and every module of
    the package they import, followed transitively (so a move or a rename follows the code)."""
    import ast

    root = Path(package_root) if package_root is not None else Path(__file__).resolve().parent.parent
    seen = set()
    todo = [str(p.relative_to(root)) for pattern in COUNTING_ROOTS for p in sorted(root.glob(pattern))]
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        here = (root / rel).parent
        for node in ast.walk(ast.parse((root / rel).read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue  # the package imports itself relatively; absolute imports are other packages
            base = here
            for _ in range(node.level - 1):
                base = base.parent
            parts = node.module.split(".") if node.module else []
            targets = [parts] if node.module else [[alias.name] for alias in node.names]
            if node.module:  # `from .pkg import module` names modules too
                targets += [parts + [alias.name] for alias in node.names]
            for target in targets:
                path = base.joinpath(*target)
                for candidate in (path.with_suffix(".py"), path / "__init__.py"):
                    if candidate.is_file():
                        todo.append(str(candidate.relative_to(root)))
    return sorted(seen)


#: _counting_code_hash's answer per state of the package's files (a sweep's jobs share a process)
_CODE_HASHES: Dict[tuple, str] = {}


def _counting_code_hash() -> str:
    """The source of everything a count runs through: a change to it must not reuse old counts.
    Walking the imports takes ~60 ms; it is redone only when a file of the package changed."""
    import hashlib

    root = Path(__file__).resolve().parent.parent
    state = tuple((str(p), st.st_mtime_ns, st.st_size) for p in sorted(root.rglob("*.py")) for st in (p.stat(),))
    if state not in _CODE_HASHES:
        digest = hashlib.sha1()
        for rel in counting_sources():
            digest.update(rel.encode() + b"\0" + (root / rel).read_bytes())
        _CODE_HASHES.clear()
        _CODE_HASHES[state] = digest.hexdigest()[:12]
    return _CODE_HASHES[state]


def build_model_on_meta(model_cfg, vocab_size: int, seed: int, dtype):
    """The model's shape on the meta device (no memory); `dtype` a torch dtype or its name."""
    import torch

    from ..numerics.model import build_model

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."))
    return build_model(model_cfg, vocab_size, seed, device="meta", dtype=dtype)


def shape_facts(model_cfg, vocab_size: int) -> Dict[str, int]:
    """The parameter count and the embedding's size of a model shape: built once on the meta
    device, then cached beside the FLOP counts (a numerics-free run then builds no model)."""

    def count() -> Dict[str, int]:
        model = build_model_on_meta(model_cfg, vocab_size, 0, "torch.float32")
        return {
            "n_params": sum(p.numel() for p in model.parameters()),
            "embedding": model.get_input_embeddings().weight.numel(),
        }

    return cached_counts(
        {
            "shape_of": {k: model_cfg[k] for k in model_cfg},
            "vocab": vocab_size,
            "transformers": _version("transformers"),
        },
        count,
    )


def parameter_count(model_cfg, vocab_size: int) -> int:
    return shape_facts(model_cfg, vocab_size)["n_params"]


def _version(package: str) -> str:
    """An installed package's version, read without importing it."""
    from importlib.metadata import version

    return version(package)
