"""The default corpus: real English text that the checkout and `make setup` bring, so a run
never touches a hub (data.sources; data.py tokenizes and packs it):

  pydoc_topics       CPython 3.11.7's pydoc topic pages (pydoc_data.topics), ~0.46 MB
  stdlib_docstrings  docstrings of 300+ characters from CPython 3.11.7's standard library, ~1 MB
  lee_background     the Lee news corpus (300 Australian news stories), ~0.36 MB,
                     extracted by `make setup` from the gensim wheel into .cache/corpus/
  package_docstrings docstrings of 300+ characters from the scientific packages that
                     requirements.txt installs (transformers, torch, sympy, pandas, ...),
                     ~22 MB, so that a 3,000-step default run sees its data < 2 times

The first two are read from texts/cpython-3.11.7.json.xz, shipped with the package (357 kB;
CPython's texts, under the PSF License: texts/LICENSE-PSF.txt), not from the running
interpreter: the standard library's docstrings and pydoc's pages change between Python patch
releases and between builds (Debian's 3.11.2 gives 1,346 docstrings against 3.11.7's 1,445), and
with them every loss. So every supported Python gives the same corpus. `python
scripts/fetch_corpus.py --extract-python-texts` (under CPython 3.11.7) writes the file again;
`live_python_texts()` reads the running interpreter's.
"""

from __future__ import annotations

import ast
import functools
import json
import lzma
import sysconfig
from pathlib import Path
from typing import Callable, Dict, List

from .paths import default_cache_dir

#: the interpreter the shipped texts come from, and the file
PYTHON_TEXTS_VERSION = "3.11.7"
PYTHON_TEXTS = Path(__file__).resolve().parent / "texts" / f"cpython-{PYTHON_TEXTS_VERSION}.json.xz"


@functools.lru_cache(maxsize=1)
def python_texts() -> Dict[str, List[str]]:
    """The shipped pydoc topics and standard-library docstrings (keys as the sources)."""
    if not PYTHON_TEXTS.exists():
        raise FileNotFoundError(f"{PYTHON_TEXTS} is missing: a broken checkout or install (it ships with mecefo_exp)")
    data = json.loads(lzma.decompress(PYTHON_TEXTS.read_bytes()).decode("utf-8"))
    return {"pydoc_topics": data["pydoc_topics"], "stdlib_docstrings": data["stdlib_docstrings"]}


def python_texts_sha() -> str:
    import hashlib

    return hashlib.sha1(PYTHON_TEXTS.read_bytes()).hexdigest()[:12]


def _pydoc_topics() -> List[str]:
    return list(python_texts()["pydoc_topics"])


def _stdlib_docstrings() -> List[str]:
    return list(python_texts()["stdlib_docstrings"])


def _live_pydoc_topics() -> List[str]:
    import pydoc_data.topics

    return [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]


#: Installed packages whose docstrings join the local corpus: what requirements.txt (and
#: torch's own dependencies) bring, with their versions pinned by constraints.txt.
DOCSTRING_PACKAGES = ("transformers", "torch", "sympy", "pandas", "networkx", "numpy", "matplotlib", "huggingface_hub")
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


def _live_stdlib_docstrings() -> List[str]:
    return _docstrings(Path(sysconfig.get_paths()["stdlib"]))


def live_python_texts() -> Dict[str, List[str]]:
    """The running interpreter's pydoc topics and standard-library docstrings, read as the
    shipped file was made."""
    return {"pydoc_topics": _live_pydoc_topics(), "stdlib_docstrings": _live_stdlib_docstrings()}


def _package_root(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"data.sources=package_docstrings needs the package {name!r}, which is not "
            "installed: run `make setup`, or drop package_docstrings from data.sources"
        )
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


#: The default corpus's fingerprint in RESULTS.md's studies and tests/golden/
REFERENCE_FINGERPRINT = "f3050ff3fc14"
#: The reference corpus was built with these versions of the packages whose text it reads (package_docstrings) or that make its tokens
#: (tokenizers): a different version changes the tokens, and with them every loss.
REFERENCE_VERSIONS = {
    "transformers": "5.23.0",
    "torch": "2.13.0",
    "sympy": "1.14.0",
    "pandas": "3.1.1",
    "networkx": "3.6.1",
    "numpy": "2.4.6",
    "matplotlib": "3.11.2",
    "huggingface_hub": "2.4.0",
    "tokenizers": "0.23.3",
}


def version_differences() -> List[str]:
    """'name X (the reference corpus: Y)' for every package whose installed version differs from
    the one the reference corpus was built with (a local build tag such as +cpu does not count)."""
    got = package_versions(tuple(REFERENCE_VERSIONS))
    return [
        f"{name} {got[name]} (the reference corpus: {want})"
        for name, want in REFERENCE_VERSIONS.items()
        if got[name].split("+")[0] != want
    ]


def why_fingerprint_differs(fingerprint: str, reference: str) -> str:
    """One line: why the corpus built here has another fingerprint than the reference one."""
    differs = version_differences()
    if differs:
        cause = "installed versions differ: " + ", ".join(differs) + " (`make setup` installs the pinned ones)"
    else:
        cause = (
            "the packages have the reference versions, so the difference is elsewhere: the Lee corpus "
            "(.cache/corpus/), the shipped CPython texts or the code that builds the corpus"
        )
    return (
        f"the default corpus here has fingerprint {fingerprint}, not {reference} (the one RESULTS.md and "
        f"tests/golden/ were made with): {cause}"
    )


def _lee_background() -> List[str]:
    path = default_cache_dir() / "corpus" / "lee_background.cor"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `make setup` (it extracts the Lee corpus from the gensim wheel), "
            "or drop lee_background from data.sources"
        )
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
