"""The default corpus: real English text that the Python install and `make setup` bring, so a run
never touches a hub (data.sources; data.py tokenizes and packs it):

  pydoc_topics       CPython's pydoc topic pages (pydoc_data.topics), ~0.46 MB
  stdlib_docstrings  docstrings of 300+ characters from the standard library, ~1 MB
  lee_background     the Lee news corpus (300 Australian news stories), ~0.36 MB,
                     extracted by `make setup` from the gensim wheel into .cache/corpus/
  package_docstrings docstrings of 300+ characters from the scientific packages that
                     requirements.txt installs (transformers, torch, sympy, pandas, ...),
                     ~22 MB, so that a 3,000-step default run sees its data < 2 times
"""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path
from typing import Callable, Dict, List

from .paths import default_cache_dir


def _pydoc_topics() -> List[str]:
    import pydoc_data.topics

    return [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]


#: Installed packages whose docstrings join the local corpus: what requirements.txt (and
#: torch's own dependencies) bring, with their versions pinned by constraints.txt.
DOCSTRING_PACKAGES = ("transformers", "torch", "sympy", "pandas", "networkx", "numpy", "matplotlib",
                      "huggingface_hub")
#: path parts whose files are skipped: test suites repeat the library's own text
SKIP_PARTS = ("test", "tests", "testing", "site-packages", "idlelib", "lib2to3")


def _docstrings(root: Path, min_chars: int = 300) -> List[str]:
    """Docstrings of `min_chars`+ characters of every module, class and function under root,
    in sorted file order (so the list is the same on every machine with the same files)."""
    docs = []
    for path in sorted(root.rglob("*.py")):
        if any(p in SKIP_PARTS for p in path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    docs.append(doc)
    return docs


def _stdlib_docstrings() -> List[str]:
    return _docstrings(Path(sysconfig.get_paths()["stdlib"]))


def _package_root(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"data.sources=package_docstrings needs the package {name!r}, which is not "
                                "installed: run `make setup`, or drop package_docstrings from data.sources")
    return Path(list(spec.submodule_search_locations)[0])


def _package_docstrings(packages=DOCSTRING_PACKAGES) -> List[str]:
    docs: List[str] = []
    for name in packages:
        docs.extend(_docstrings(_package_root(name)))
    return docs


def package_versions(packages=DOCSTRING_PACKAGES) -> Dict[str, str]:
    """The versions the package_docstrings source was read from (part of the cache key)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def _lee_background() -> List[str]:
    path = default_cache_dir() / "corpus" / "lee_background.cor"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `make setup` (it extracts the Lee corpus from the gensim wheel), "
            "or drop lee_background from data.sources")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CORPUS_SOURCES: Dict[str, Callable[[], List[str]]] = {
    "pydoc_topics": _pydoc_topics,
    "stdlib_docstrings": _stdlib_docstrings,
    "lee_background": _lee_background,
    "package_docstrings": _package_docstrings,
}


def load_local_documents(sources) -> List[str]:
    unknown = [s for s in sources if s not in CORPUS_SOURCES]
    if unknown:
        raise ValueError(f"data.sources: unknown {unknown}; allowed: {', '.join(CORPUS_SOURCES)}")
    docs: List[str] = []
    seen = set()
    for name in sources:
        for doc in CORPUS_SOURCES[name]():
            if doc not in seen:  # libraries copy docstrings between classes; keep the first
                seen.add(doc)
                docs.append(doc)
    return docs
