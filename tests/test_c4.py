"""data=c4 offline and at scale: the tokenizer is checked first, local globs stream and stop
at the token budget, validation comes from its own files, data.cache_dir is used.

Everything here is made by the test: json.gz shards and a tiny BPE tokenizer saved to a
local folder (no hub)."""

import gzip
import json
import subprocess
import sys

import pytest

from conftest import ROOT, compose_cfg

pytest.importorskip("datasets", reason="data=c4 needs the datasets package (requirements-optional.txt)")

WORDS = (
    "the harness reads shards of web text from disk and packs them into blocks for "
    "every worker while failures come and go"
).split()


def _doc(i, marker=""):
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(40)) + f" {marker}document {i}."


def make_tokenizer(folder):
    """A 400-token byte-level BPE, saved the way save_pretrained does (AutoTokenizer loads it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["</s>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([_doc(i, "zebra ") for i in range(200)], trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>"})
    )
    return folder


def write_shard(path, docs):
    with gzip.open(path, "wt") as f:
        for i, text in docs:
            f.write(json.dumps({"text": text, "url": f"https://example.org/{i}"}) + "\n")


@pytest.fixture
def shards(tmp_path):
    """Two good training shards, a third that is not gzip at all, and one validation shard."""
    train = tmp_path / "c4" / "train"
    train.mkdir(parents=True)
    write_shard(train / "c4-train.00000-of-00003.json.gz", [(i, _doc(i)) for i in range(200)])
    write_shard(train / "c4-train.00001-of-00003.json.gz", [(i, _doc(i)) for i in range(200, 400)])
    # a reader that materialises every file dies here; one that streams and stops at the budget never opens it
    (train / "c4-train.00002-of-00003.json.gz").write_bytes(b"this is not gzip" * 100)
    val = tmp_path / "c4" / "val"
    val.mkdir()
    write_shard(val / "c4-validation.00000-of-00001.json.gz", [(i, _doc(i, "zebra ")) for i in range(100)])
    return {
        "path": f"{train}/c4-train.*.json.gz",
        "val_path": f"{val}/*.json.gz",
        "tokenizer": str(make_tokenizer(tmp_path / "tok")),
        "cache": str(tmp_path / "cache"),
    }


def c4_overrides(s, *extra):
    return [
        "data=c4",
        f"data.path={s['path']}",
        f"data.val_path={s['val_path']}",
        f"data.tokenizer={s['tokenizer']}",
        f"data.cache_dir={s['cache']}",
        *extra,
    ]


def test_local_glob_streams_stops_at_the_token_budget_and_validates_on_its_own_files(shards):
    from pathlib import Path

    from mecefo_exp.data import _load_tokenizer, load_corpus

    cfg = compose_cfg(c4_overrides(shards, "data.max_train_tokens=3000", "data.max_val_tokens=700"))
    corpus = load_corpus(cfg.data)  # the corrupt third shard is never opened: the budget is full before it
    assert corpus.train.size == 3000 and corpus.val.size == 700
    assert corpus.vocab_size == 400 and corpus.train.max() < 400
    tok = _load_tokenizer(shards["tokenizer"])
    assert "zebra" in tok.decode(corpus.val.tolist())  # validation text is the validation shard's
    assert "zebra" not in tok.decode(corpus.train.tolist())
    cached = list((Path(shards["cache"]) / "data").glob("c4-*/meta.json"))
    assert len(cached) == 1  # data.cache_dir holds the tokenized corpus
    assert load_corpus(cfg.data).fingerprint == corpus.fingerprint


def test_a_budget_beyond_the_good_files_reaches_the_broken_one(shards):
    """The other side of the streaming test: the broken shard is really in the glob."""
    from mecefo_exp.data import load_corpus

    cfg = compose_cfg(c4_overrides(shards, "data.max_train_tokens=1000000", "data.max_val_tokens=700"))
    with pytest.raises(Exception) as err:
        load_corpus(cfg.data)
    assert not isinstance(err.value, AssertionError)


def test_the_tokenizer_is_checked_before_any_data_is_read(shards, tmp_path):
    from mecefo_exp.config import ConfigError
    from mecefo_exp.data import load_corpus

    for name, where in [
        (str(tmp_path / "no-tokenizer-here"), "no folder"),
        ("no-such-org/no-such-tokenizer", "hub cache"),
    ]:
        # the training glob is the broken shard alone: reading any data first would fail differently
        cfg = compose_cfg(
            [
                "data=c4",
                f"data.path={tmp_path}/c4/train/*00002*",
                f"data.tokenizer={name}",
                f"data.cache_dir={shards['cache']}",
            ]
        )
        with pytest.raises(ConfigError) as err:
            load_corpus(cfg.data)
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(f"data.tokenizer={name!r}") and where in msg
        assert "save_pretrained" in msg


@pytest.mark.slow  # a run.py process (~6 s): `make test-cli`
def test_cli_says_one_line_about_a_missing_tokenizer(shards, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            *c4_overrides(shards),
            f"data.tokenizer={tmp_path}/nope",
            f"hydra.run.dir={tmp_path}/r",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: data.tokenizer=")


def test_val_path_without_path_is_rejected(shards):
    from mecefo_exp.config import ConfigError, validate

    with pytest.raises(ConfigError, match="data.val_path needs data.path"):
        validate(compose_cfg(["data=c4", f"data.val_path={shards['val_path']}"]))


def test_a_tiny_run_trains_on_the_local_c4_files(run_exp, shards):
    summary, _ = run_exp(
        *c4_overrides(shards, "data.max_train_tokens=4000", "data.max_val_tokens=700"),
        "failure=none",
        "method=checkpoint",
        "trainer.max_steps=3",
        "trainer.eval_every=0",
    )
    assert summary["status"] == "ok" and summary["n_params"] > 0 and summary["final_val_ppl"] > 1
