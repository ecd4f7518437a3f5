"""The default corpus is the same on every Python: the interpreter-dependent texts (pydoc's topic
pages, the standard library's docstrings) ship with the package, extracted from CPython 3.11.7,
and when the corpus built here still differs from the reference, the cause is named in one line."""

import hashlib
import platform
import sys
import sysconfig

import pytest

from mecefo_exp import local_corpus


def test_the_shipped_texts_are_there_with_their_source_and_licence():
    texts = local_corpus.python_texts()
    assert len(texts["pydoc_topics"]) == 79 and len(texts["stdlib_docstrings"]) == 1445
    assert all(len(d) >= 300 for d in texts["stdlib_docstrings"])
    assert local_corpus.PYTHON_TEXTS.stat().st_size < 400_000
    licence = (local_corpus.PYTHON_TEXTS.parent / "LICENSE-PSF.txt").read_text()
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence


def test_the_corpus_does_not_read_the_running_interpreter(monkeypatch, tmp_path):
    """Another standard library and other pydoc topics (as another Python has) change nothing."""
    import pydoc_data.topics

    before = local_corpus.load_local_documents(["pydoc_topics", "stdlib_docstrings"])
    fake_stdlib = tmp_path / "lib"
    fake_stdlib.mkdir()
    (fake_stdlib / "mod.py").write_text('"""' + "another interpreter's docstring " * 20 + '"""\n')
    real_paths = sysconfig.get_paths()
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {**real_paths, "stdlib": str(fake_stdlib)})
    monkeypatch.setattr(pydoc_data.topics, "topics", {"a": "another topic page"})
    assert local_corpus.live_python_texts()["pydoc_topics"] == ["another topic page"]  # the patch took
    assert local_corpus.load_local_documents(["pydoc_topics", "stdlib_docstrings"]) == before


@pytest.mark.slow
@pytest.mark.skipif(
    platform.python_implementation() != "CPython" or platform.python_version() != local_corpus.PYTHON_TEXTS_VERSION,
    reason="the shipped texts come from CPython 3.11.7",
)
def test_the_shipped_texts_are_what_cpython_3_11_7_gives():
    assert local_corpus.live_python_texts() == local_corpus.python_texts()


def test_the_reference_fingerprint_is_the_one_results_md_states():
    from analysis import published

    stated = published.published_fingerprints(published.RESULTS.read_text())
    assert stated["paper_mini"]["data"] == local_corpus.REFERENCE_FINGERPRINT


def test_the_default_corpus_built_here_is_the_reference_one():
    """`make setup` built the default corpus (.cache/data/default-corpus.txt holds its fingerprint);
    when it differs the message says why, never just 'regenerate'."""
    from mecefo_exp.paths import default_cache_dir

    stamp = default_cache_dir() / "data" / "default-corpus.txt"
    if not stamp.exists():
        pytest.skip("the default corpus is not built here (make setup builds it)")
    built = stamp.read_text().strip()
    assert built == local_corpus.REFERENCE_FINGERPRINT, (
        local_corpus.why_fingerprint_differs(built, local_corpus.REFERENCE_FINGERPRINT)
        + f" [Python {sys.version.split()[0]}]"
    )


def test_a_different_package_version_is_named_as_the_cause(monkeypatch):
    versions = {name: v for name, v in local_corpus.REFERENCE_VERSIONS.items()}
    versions["torch"] = "2.13.0+cu128"  # a build tag is not a difference
    assert local_corpus.version_differences.__module__ == "mecefo_exp.local_corpus"
    monkeypatch.setattr(local_corpus, "package_versions", lambda packages: {n: versions[n] for n in packages})
    assert local_corpus.version_differences() == []
    versions["sympy"] = "1.15.0"
    line = local_corpus.why_fingerprint_differs("0123456789ab", local_corpus.REFERENCE_FINGERPRINT)
    assert "sympy 1.15.0 (the reference corpus: 1.14.0)" in line and "\n" not in line
    assert "Regenerate" not in line and "make results" not in line


def test_the_cache_key_names_the_shipped_texts_not_the_interpreter():
    import inspect

    from mecefo_exp import data

    source = inspect.getsource(data._load_local)
    assert "sys.version" not in source and "python_texts_sha()" in source
    assert local_corpus.python_texts_sha() == hashlib.sha1(local_corpus.PYTHON_TEXTS.read_bytes()).hexdigest()[:12]
