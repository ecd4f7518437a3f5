"""Extract the Lee news corpus from the gensim wheel into .cache/corpus/ (run by `make setup`;
$MECEFO_CACHE/corpus/ when that is set, where the runs look for it). With --tokenize, then
build the default corpus and its tokenizer (~1-2 min on 2 cores, once; cached in .cache/data/),
so that the first run, and the tests that check RESULTS.md's data fingerprint, find it ready.

gensim ships the corpus as test data; we download its wheel without installing gensim,
copy one text file out of it and throw the wheel away. The pinned version keeps the text,
and so the tokenizer and every run, identical across machines.
"""

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

GENSIM = "gensim==4.4.0"
MEMBER = "gensim/test/test_data/lee_background.cor"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mecefo_exp.paths import default_cache_dir  # noqa: E402  (the checkout's package, installed or not)

TARGET = default_cache_dir() / "corpus" / "lee_background.cor"


def tokenize() -> int:
    """Build (or find) the default corpus: the one `data=local` reads with its default sources."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mecefo_exp import api
    from mecefo_exp.data import load_corpus

    data_cfg = api.compose(check=False).data
    corpus = load_corpus(data_cfg)
    stamp = default_cache_dir() / "data" / "default-corpus.txt"
    stamp.write_text(f"{corpus.fingerprint}\n")
    print(
        f"default corpus ready: {corpus.train.size:,} training and {corpus.val.size:,} validation tokens, "
        f"fingerprint {corpus.fingerprint}"
    )
    from mecefo_exp.local_corpus import REFERENCE_FINGERPRINT, why_fingerprint_differs

    if corpus.fingerprint != REFERENCE_FINGERPRINT:  # runs work, but their numbers are not RESULTS.md's
        print(f"warning: {why_fingerprint_differs(corpus.fingerprint, REFERENCE_FINGERPRINT)}")
    return 0


def extract_python_texts() -> int:
    """Write mecefo_exp/texts/cpython-<version>.json.xz from the running interpreter's pydoc
    topics and standard library (run under CPython 3.11.7: the default corpus reads that file)."""
    import json
    import lzma
    import platform

    from mecefo_exp.local_corpus import PYTHON_TEXTS, PYTHON_TEXTS_VERSION, live_python_texts

    version = platform.python_version()
    if version != PYTHON_TEXTS_VERSION or platform.python_implementation() != "CPython":
        print(
            f"error: the shipped texts come from CPython {PYTHON_TEXTS_VERSION}; this is "
            f"{platform.python_implementation()} {version}",
            file=sys.stderr,
        )
        return 2
    texts = live_python_texts()
    payload = {
        "source": f"CPython {version}: pydoc_data.topics and the docstrings of 300+ characters of the "
        "standard library's modules, classes and functions (test, idlelib and lib2to3 folders "
        "skipped), in sorted file order",
        "license": "PSF License Agreement for Python (LICENSE-PSF.txt beside this file)",
        "python": version,
        **texts,
    }
    raw = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")
    PYTHON_TEXTS.parent.mkdir(parents=True, exist_ok=True)
    PYTHON_TEXTS.write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
    print(
        f"wrote {PYTHON_TEXTS} ({PYTHON_TEXTS.stat().st_size:,} bytes: {len(texts['pydoc_topics'])} pydoc "
        f"topics, {len(texts['stdlib_docstrings'])} docstrings)"
    )
    return 0


def main() -> int:
    if "--tokenize" in sys.argv[1:]:
        return tokenize()
    if "--extract-python-texts" in sys.argv[1:]:
        return extract_python_texts()
    if TARGET.exists():
        print(f"{TARGET} already there")
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp, GENSIM],
            check=True,
        )
        wheel = next(Path(tmp).glob("gensim-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            data = z.read(MEMBER)
    TARGET.with_suffix(".tmp").write_bytes(data)
    TARGET.with_suffix(".tmp").rename(TARGET)
    print(f"extracted {MEMBER} ({len(data)} bytes) -> {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
