"""The sample stream is a pure function of (seed, step, worker); the split is by document."""

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import compose_cfg
from mecefo_exp.data import SampleStream, is_validation, validation_blocks


def _tokens(n=10_000):
    return np.arange(n, dtype=np.int32) % 5003


def test_micro_batch_is_a_pure_function_of_seed_step_worker():
    a = SampleStream(_tokens(), seq_len=16, micro_batch=3, n_workers=4, seed=7)
    b = SampleStream(_tokens(), seq_len=16, micro_batch=3, n_workers=4, seed=7)
    # b is read in another order, and some of it twice: who asks, and when, changes nothing
    wanted = [(s, w) for s in range(30) for w in range(4)]
    for s, w in reversed(wanted):
        b.micro_batch(s, w)
    for s, w in wanted:
        assert torch.equal(a.micro_batch(s, w), b.micro_batch(s, w))


def test_stream_depends_on_seed_step_and_worker():
    a = SampleStream(_tokens(), 16, 3, 4, seed=7)
    c = SampleStream(_tokens(), 16, 3, 4, seed=8)
    assert not torch.equal(a.micro_batch(0, 0), c.micro_batch(0, 0))
    assert not torch.equal(a.micro_batch(0, 0), a.micro_batch(0, 1))
    assert not torch.equal(a.micro_batch(0, 0), a.micro_batch(1, 0))


def test_one_epoch_visits_every_block_once():
    s = SampleStream(_tokens(17 * 40), seq_len=16, micro_batch=2, n_workers=2, seed=0)
    assert s.n_blocks == 40
    seen = [i for step in range(10) for w in range(2) for i in s.micro_batch_indices(step, w)]
    assert sorted(seen) == list(range(40))


def test_blocks_are_packed_next_token_windows():
    s = SampleStream(_tokens(), seq_len=16, micro_batch=1, n_workers=1, seed=0)
    mb = s.micro_batch(0, 0)[0]
    assert mb.shape == (17,)
    assert torch.equal(mb[1:] - mb[:-1], torch.ones(16, dtype=torch.long))  # contiguous text


def test_validation_split_is_deterministic_and_by_document():
    docs = [f"document number {i} " * 5 for i in range(2000)]
    val = [d for d in docs if is_validation(d, 0.1)]
    assert val == [d for d in docs if is_validation(d, 0.1)]
    assert 120 < len(val) < 280  # about 10 percent
    blocks = validation_blocks(_tokens(), 16, max_blocks=5)
    assert blocks.shape == (5, 17)


def test_local_corpus_loads_offline_and_is_cached():
    from conftest import compose_cfg
    from mecefo_exp.data import load_corpus

    cfg = compose_cfg([SMALL_CORPUS])
    a = load_corpus(cfg.data)
    b = load_corpus(cfg.data)
    assert a.fingerprint == b.fingerprint
    assert a.train.size > 400_000 and a.val.size > 10_000
    assert a.train.max() < a.vocab_size <= cfg.data.vocab_size


def test_c4_path_reads_local_json_files_with_a_local_tokenizer(tmp_path):
    """data=c4 through the datasets library, on local files and a local tokenizer folder."""
    import json
    import shutil

    from conftest import compose_cfg
    from mecefo_exp.data import load_corpus

    local = compose_cfg([SMALL_CORPUS])
    load_corpus(local.data)  # the cached local BPE tokenizer doubles as a transformers tokenizer
    tok_json = next((Path(__file__).parent.parent / ".cache" / "data").glob("local-*/tokenizer.json"))
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    shutil.copy(tok_json, tok_dir / "tokenizer.json")
    (tok_dir / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"})
    )
    shard = tmp_path / "c4-train.00000-of-00001.json"
    with open(shard, "w") as f:
        for i in range(300):
            f.write(
                json.dumps(
                    {
                        "text": f"Document {i} says that the harness reads C4 shards from disk. " * 3,
                        "url": f"https://example.org/{i}",
                    }
                )
                + "\n"
            )
    cfg = compose_cfg(
        [
            "data=c4",
            f"data.path={tmp_path}/c4-*.json",
            f"data.tokenizer={tok_dir}",
            f"data.cache_dir={tmp_path}/cache",
            "data.val_fraction=0.1",
        ]
    )
    corpus = load_corpus(cfg.data)
    assert corpus.train.size > 10_000 and corpus.val.size > 500
    assert corpus.vocab_size == 4096 and corpus.train.max() < 4096
    again = load_corpus(cfg.data)  # cached
    assert again.fingerprint == corpus.fingerprint


SMALL_CORPUS = "data.sources=[pydoc_topics,stdlib_docstrings,lee_background]"


def test_package_docstrings_are_deterministic_and_split_disjointly():
    """The package source reads the same documents in the same order every time, and the
    hash split puts each document on exactly one side, whatever the order."""
    from mecefo_exp.data import _docstrings, _package_root, is_validation

    docs = _docstrings(_package_root("networkx"))
    assert len(docs) > 500 and docs == _docstrings(_package_root("networkx"))
    val = {d for d in docs if is_validation(d, 0.05)}
    train = {d for d in docs if not is_validation(d, 0.05)}
    assert not (val & train) and len(val) + len(train) == len(set(docs))
    assert 0.02 < len(val) / len(set(docs)) < 0.08
    assert val == {d for d in reversed(docs) if is_validation(d, 0.05)}


@pytest.mark.slow
def test_default_corpus_is_large_enough_for_3000_steps():
    """The default corpus (~90 s to build on 2 cores, then cached): a 3,000-step run of the
    default shape (8 workers x 4 x 129 tokens) sees its training tokens at most ~2 times."""
    from mecefo_exp.data import load_corpus

    cfg = compose_cfg([])
    assert "package_docstrings" in cfg.data.sources
    corpus = load_corpus(cfg.data)
    tokens_3000 = 3000 * cfg.cluster.n_workers * cfg.data.micro_batch * (cfg.data.seq_len + 1)
    assert tokens_3000 / corpus.train.size <= 2.0
    assert corpus.val.size > 100_000


def test_the_caches_follow_mecefo_cache(tmp_path, monkeypatch):
    """An installed package has no checkout: its corpus and its token caches live under $MECEFO_CACHE."""
    from omegaconf import OmegaConf

    from mecefo_exp.data import cache_root
    from mecefo_exp.local_corpus import CORPUS_SOURCES

    monkeypatch.setenv("MECEFO_CACHE", str(tmp_path / "cache"))
    assert cache_root(OmegaConf.create({"cache_dir": None})) == tmp_path / "cache"
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "cache" / "corpus" / "lee_background.cor")):
        CORPUS_SOURCES["lee_background"]()
