"""Corpus -> tokenizer -> packed blocks -> the global sample stream.

The sample stream is the contract every method relies on: the micro-batch of (step,
worker) is a pure function of (seed, step, worker). Who computes it, and how often (a
rollback replays it, a neighbour takes it over, Oobleck re-splits it) never changes it.

Local data (the default) is real English text that the checkout and `make setup` bring
(local_corpus.py), the same on every Python, so a run never touches a hub. `data=c4` reads C4 (or any
json/parquet text files) with the datasets library and a transformers tokenizer, for
machines that have them.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import itertools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Tuple

import numpy as np
import torch
from filelock import FileLock

from .local_corpus import (
    _docstrings,  # noqa: F401
    _lee_background,  # noqa: F401
    _package_docstrings,  # noqa: F401
    _package_root,  # noqa: F401
    _pydoc_topics,  # noqa: F401
    _stdlib_docstrings,  # noqa: F401
    load_local_documents,  # noqa: F401
    package_versions,  # noqa: F401
    python_texts,  # noqa: F401
    python_texts_sha,  # noqa: F401
)
from .paths import default_cache_dir

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"


def cache_root(data_cfg) -> Path:
    """data.cache_dir, else the checkout's .cache/, $MECEFO_CACHE or ~/.cache/mecefo-exp (paths.py)."""
    root = Path(data_cfg.cache_dir) if data_cfg.cache_dir else default_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    return root


# ---------------------------------------------------------------------------- corpus
#: Bumped whenever the documents a source yields change (2: documents de-duplicated across
#: sources, `testing` folders skipped), so that no cache built by older code is reused.
CORPUS_FORMAT = 2


def is_validation(doc: str, val_fraction: float) -> bool:
    """Deterministic split by document: a hash of the text, not the order or a seed."""
    h = int.from_bytes(hashlib.sha1(doc.encode("utf-8")).digest()[:8], "little")
    return (h % 1_000_000) < val_fraction * 1_000_000


# ------------------------------------------------------------------------- tokenizer
def train_bpe_tokenizer(docs: List[str], vocab_size: int, path: Path):
    """A byte-level BPE tokenizer trained on the corpus (saved as tokenizer.json)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(docs, trainer=trainer)
    tok.save(str(path))
    return tok


def _encode_stream(encode_batch, docs: List[str], eos_id: int, max_tokens: int) -> np.ndarray:
    """Concatenate documents, each followed by EOS, into one token array."""
    ids: List[int] = []
    for start in range(0, len(docs), 256):
        for seq in encode_batch(docs[start : start + 256]):
            ids.extend(seq)
            ids.append(eos_id)
        if len(ids) >= max_tokens:
            break
    return np.asarray(ids[:max_tokens], dtype=np.int32)


@dataclass
class TokenizedCorpus:
    train: np.ndarray  # token ids, documents joined by EOS
    val: np.ndarray
    vocab_size: int
    fingerprint: str  # hash of the tokens, recorded in the run summary


def _cached(key: str, root: Path, build: Callable[[Path], Tuple[np.ndarray, np.ndarray, int]]) -> TokenizedCorpus:
    folder = root / "data" / key
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        done = folder / "meta.json"
        if not done.exists():
            train, val, vocab = build(folder)
            np.save(folder / "train.npy", train)
            np.save(folder / "val.npy", val)
            fp = hashlib.sha1(train.tobytes() + val.tobytes()).hexdigest()[:12]
            done.write_text(
                json.dumps(
                    {
                        "vocab_size": vocab,
                        "fingerprint": fp,
                        "train_tokens": int(train.size),
                        "val_tokens": int(val.size),
                    }
                )
            )
        meta = json.loads(done.read_text())
    return TokenizedCorpus(
        np.load(folder / "train.npy"), np.load(folder / "val.npy"), meta["vocab_size"], meta["fingerprint"]
    )


def load_corpus(data_cfg) -> TokenizedCorpus:
    if data_cfg.name == "local":
        return _load_local(data_cfg)
    if data_cfg.name == "c4":
        return _load_c4(data_cfg)
    raise ValueError(f"data.name={data_cfg.name!r}: allowed: local, c4")


def _builder_hash() -> str:
    """A hash of the code that turns the sources into tokens: an edit to it builds the corpus
    again instead of reusing tokens the new code would not make (and the data fingerprint then
    says whether the tokens changed)."""
    import inspect

    parts: List[Callable[..., object]] = [
        python_texts,
        _pydoc_topics,
        _docstrings,
        _stdlib_docstrings,
        _package_root,
        _package_docstrings,
        _lee_background,
        load_local_documents,
        is_validation,
        train_bpe_tokenizer,
        _encode_stream,
        _load_local,
    ]
    return hashlib.sha1("".join(inspect.getsource(f) for f in parts).encode()).hexdigest()[:12]


def _load_local(data_cfg) -> TokenizedCorpus:
    # The texts are fixed by the shipped CPython texts (their file's hash), the pinned gensim
    # wheel and the pinned packages' versions, so the key need not hash the texts themselves
    # (reading them takes a minute; the token arrays are cached, their hash is the fingerprint).
    sources = list(data_cfg.sources)
    versions = package_versions() if "package_docstrings" in sources else {}
    ident = json.dumps(
        [CORPUS_FORMAT, sources, python_texts_sha(), data_cfg.vocab_size, data_cfg.val_fraction, _builder_hash()]
        + ([versions] if versions else [])
    )
    key = "local-" + hashlib.sha1(ident.encode()).hexdigest()[:12]

    def build(folder: Path):
        log.info(
            "building the local corpus from %s (once, cached in %s; the package docstrings take "
            "~1-2 min to read and tokenize on 2 cores)",
            ", ".join(sources),
            folder,
        )
        docs = load_local_documents(sources)
        train_docs = [d for d in docs if not is_validation(d, data_cfg.val_fraction)]
        val_docs = [d for d in docs if is_validation(d, data_cfg.val_fraction)]
        log.info(
            "training a %d-token BPE tokenizer on %d documents (cached in %s)",
            data_cfg.vocab_size,
            len(train_docs),
            folder,
        )
        tok = train_bpe_tokenizer(train_docs, data_cfg.vocab_size, folder / "tokenizer.json")
        eos = tok.token_to_id(EOS)

        def encode(batch):
            return [e.ids for e in tok.encode_batch(batch)]

        big = 1 << 62
        return (
            _encode_stream(encode, train_docs, eos, big),
            _encode_stream(encode, val_docs, eos, big),
            tok.get_vocab_size(),
        )

    return _cached(key, cache_root(data_cfg), build)


def _tokenizer_where(name: str) -> str:
    """Where transformers looked for `name`, for the one-line error."""
    # a hub id is "name" or "org/name"; anything else is meant as a folder
    looks_local = name.startswith(("/", ".", "~")) or name.count("/") > 1
    if looks_local or Path(name).expanduser().exists():
        folder = Path(name).expanduser()
        if not folder.exists():
            return f"no folder {folder}"
        return f"{folder} has no tokenizer.json / tokenizer_config.json that transformers can load"
    from huggingface_hub import constants

    offline = constants.HF_HUB_OFFLINE
    return f"not in the hub cache {constants.HF_HUB_CACHE}" + (
        " and the hub is off (HF_HUB_OFFLINE=1)" if offline else " and the hub did not answer"
    )


@functools.lru_cache(maxsize=4)
def _load_tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def check_tokenizer(data_cfg):
    """Load data.tokenizer before any data is read; one line if it cannot be found.

    Returns the tokenizer (kept for the corpus build). Raises ConfigError naming the
    tokenizer, where it was looked for and how to point data.tokenizer at a local folder.
    """
    from .errors import ConfigError

    name = str(data_cfg.tokenizer)
    try:
        tok = _load_tokenizer(name)
    except (OSError, ValueError, ImportError) as e:  # transformers' "not found", offline, no tokenizer files
        raise ConfigError(
            f"data.tokenizer={name!r} cannot be loaded: {_tokenizer_where(name)} ({type(e).__name__}); "
            f"set data.tokenizer=/path/to/folder holding tokenizer.json (on a machine with the hub: "
            f"AutoTokenizer.from_pretrained({name!r}).save_pretrained('/path/to/folder'))"
        ) from None
    if tok.eos_token_id is None and tok.sep_token_id is None:
        raise ConfigError(
            f"data.tokenizer={name!r} has neither an eos nor a sep token to join documents with; "
            "allowed: a tokenizer with eos_token (t5-base: </s>)"
        )
    return tok


def _files(key: str, pattern: str) -> List[str]:
    files = sorted(glob.glob(os.path.expanduser(pattern)))
    if not files:
        raise FileNotFoundError(f"{key}={pattern!r} matches no file")
    return files


def _stream_files(datasets, files: List[str], cache_dir: Path):
    """An iterable over the rows of local json/jsonl(.gz)/parquet files, read lazily in order."""
    fmt = "parquet" if files[0].endswith(".parquet") else "json"
    return datasets.load_dataset(fmt, data_files=files, split="train", streaming=True, cache_dir=str(cache_dir))


def _load_c4(data_cfg) -> TokenizedCorpus:
    """C4 (or any json/parquet text) streamed and tokenized up to max_train_tokens / max_val_tokens.

    Nothing is materialised: rows are read lazily (datasets' streaming mode, local globs
    included) and reading stops when the token budget is full, so a 20M-token run reads a
    few shards of the 1,024 and never the rest. Validation comes from data.val_path (C4's
    validation shards) or the hub's validation split; only a local data.path without
    data.val_path falls back to holding out documents by a hash of their text.
    """
    try:
        import datasets
    except ImportError as e:  # datasets is optional at import time
        raise ImportError("data=c4 needs the datasets package: pip install -r requirements-optional.txt") from e

    tok = check_tokenizer(data_cfg)  # first: a missing tokenizer must not cost a data pass
    if data_cfg.path:  # local files: never the hub
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = cache_root(data_cfg)
    hf_cache = root / "hf_datasets"
    source = [data_cfg.path or f"{data_cfg.hub_id}/{data_cfg.hub_config}", data_cfg.val_path]
    split = data_cfg.val_fraction if data_cfg.path and not data_cfg.val_path else None
    key = (
        "c4-"
        + hashlib.sha1(
            json.dumps(
                [
                    source,
                    data_cfg.tokenizer,
                    data_cfg.max_train_tokens,
                    data_cfg.max_val_tokens,
                    data_cfg.text_field,
                    split,
                ]
            ).encode()
        ).hexdigest()[:12]
    )

    def build(folder: Path):
        eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id

        def encode(batch):
            return tok(batch, add_special_tokens=False)["input_ids"]

        field, n_train, n_val = data_cfg.text_field, data_cfg.max_train_tokens, data_cfg.max_val_tokens
        if data_cfg.path:
            train_rows = _stream_files(datasets, _files("data.path", data_cfg.path), hf_cache)
            if data_cfg.val_path:
                val_rows = _stream_files(datasets, _files("data.val_path", data_cfg.val_path), hf_cache)
            else:  # one pass, documents held out by a hash of their text
                held_out: List[str] = []
                texts = _held_out_split(_texts(train_rows, field), data_cfg.val_fraction, held_out, n_val)
                train = _take_tokens(texts, encode, eos, n_train, "data.path")
                return train, _take_tokens(iter(held_out), encode, eos, n_val, "held-out documents"), len(tok)
        else:  # the hub, streamed: C4 has its own validation split

            def hub(split_name):
                return datasets.load_dataset(
                    data_cfg.hub_id, data_cfg.hub_config, split=split_name, streaming=True, cache_dir=str(hf_cache)
                )

            train_rows, val_rows = hub("train"), hub("validation")
        log.info(
            "tokenizing up to %d training and %d validation tokens with %s (streamed; cached in %s)",
            n_train,
            n_val,
            data_cfg.tokenizer,
            folder,
        )
        return (
            _take_tokens(_texts(train_rows, field), encode, eos, n_train, "data.path"),
            _take_tokens(_texts(val_rows, field), encode, eos, n_val, "data.val_path"),
            len(tok),
        )

    return _cached(key, root, build)


def _texts(rows, field: str):
    for row in rows:
        if field not in row:
            raise KeyError(f"data.text_field={field!r}: the rows have fields {sorted(row)}")
        yield row[field]


def _held_out_split(texts, val_fraction: float, held_out: List[str], max_val_tokens: int, chars_per_token: int = 8):
    """Yield the training documents; collect the validation ones (by text hash) in `held_out`,
    up to max_val_tokens x chars_per_token characters (8 bounds English under BPE tokenizers
    from above; _take_tokens then cuts at the token budget exactly)."""
    chars = 0
    for text in texts:
        if is_validation(text, val_fraction):
            if chars < max_val_tokens * chars_per_token:
                held_out.append(text)
                chars += len(text)
        else:
            yield text


def _take_tokens(texts, encode, eos_id: int, max_tokens: int, what: str, batch: int = 256) -> np.ndarray:
    """Tokenize documents as they stream in, each followed by EOS; stop at max_tokens exactly."""
    out = np.empty(max_tokens, dtype=np.int32)
    n = 0
    while n < max_tokens:
        docs = list(itertools.islice(texts, batch))
        if not docs:
            break
        for seq in encode(docs):
            seq = list(seq) + [eos_id]
            take = min(len(seq), max_tokens - n)
            out[n : n + take] = seq[:take]
            n += take
            if n == max_tokens:
                break
    if n < max_tokens:
        log.info("%s: the files hold %d tokens, fewer than the budget of %d: using all of them", what, n, max_tokens)
    return out[:n].copy()


# ---------------------------------------------------------------------- sample stream
class SampleStream:
    """Packed blocks of seq_len + 1 tokens, addressed by (step, worker).

    Global sample g = (step * n_workers + worker) * micro_batch + i. Epoch e = g // n_blocks
    is a permutation of the blocks seeded by (seed, e), so the stream is a pure function
    of (seed, step, worker) and loops over the data without repeating an order.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, micro_batch: int, n_workers: int, seed: int):
        block = seq_len + 1
        n_blocks = len(tokens) // block
        if n_blocks < 1:
            raise ValueError(f"the corpus has {len(tokens)} tokens, fewer than one block of {block}")
        self.blocks = torch.from_numpy(tokens[: n_blocks * block].astype(np.int64)).view(n_blocks, block)
        self.batch_size, self.n_workers, self.seed = micro_batch, n_workers, seed

    @property
    def n_blocks(self) -> int:
        return self.blocks.shape[0]

    @functools.lru_cache(maxsize=4)  # noqa: B019 (a few streams per run; they live as long as it)
    def _permutation(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.n_blocks, generator=g)

    def micro_batch_indices(self, step: int, worker: int) -> List[int]:
        first = (step * self.n_workers + worker) * self.batch_size
        out = []
        for g in range(first, first + self.batch_size):
            epoch, pos = divmod(g, self.n_blocks)
            out.append(int(self._permutation(epoch)[pos]))
        return out

    def micro_batch(self, step: int, worker: int) -> torch.Tensor:
        """[micro_batch, seq_len + 1] token ids of worker `worker`'s share of step `step`."""
        return self.blocks[self.micro_batch_indices(step, worker)]

    def epochs_at(self, step: int) -> float:
        return (step + 1) * self.n_workers * self.batch_size / self.n_blocks


def validation_blocks(tokens: np.ndarray, seq_len: int, max_blocks: int) -> torch.Tensor:
    block = seq_len + 1
    n = len(tokens) // block
    if max_blocks:
        n = min(n, max_blocks)
    if n < 1:
        raise ValueError(f"the validation split has {len(tokens)} tokens, fewer than one block of {block}")
    return torch.from_numpy(tokens[: n * block].astype(np.int64)).view(n, block)
