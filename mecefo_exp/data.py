"""Corpus -> tokenizer -> packed blocks -> the global sample stream.

The sample stream is the contract every method relies on: the micro-batch of (step,
worker) is a pure function of (seed, step, worker). Who computes it, and how often (a
rollback replays it, a neighbour takes it over, Oobleck re-splits it) never changes it.

Local data (the default) is real English text that the Python install and `make setup`
bring, so a run never touches a hub:
  pydoc_topics       CPython's pydoc topic pages (pydoc_data.topics), ~0.46 MB
  stdlib_docstrings  docstrings of 300+ characters from the standard library, ~1 MB
  lee_background     the Lee news corpus (300 Australian news stories), ~0.36 MB,
                     extracted by `make setup` from the gensim wheel into .cache/corpus/
  package_docstrings docstrings of 300+ characters from the scientific packages that
                     requirements.txt installs (transformers, torch, sympy, pandas, ...),
                     ~22 MB, so that a 3,000-step default run sees its data < 2 times
`data=c4` reads C4 (or any json/parquet text files) with the datasets library and a
transformers tokenizer, for machines that have them.
"""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import json
import logging
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
from filelock import FileLock

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EOS = "<|endoftext|>"


def cache_root(data_cfg) -> Path:
    root = Path(data_cfg.cache_dir) if data_cfg.cache_dir else PROJECT_ROOT / ".cache"
    root.mkdir(parents=True, exist_ok=True)
    return root


# ---------------------------------------------------------------------------- corpus
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
    path = PROJECT_ROOT / ".cache" / "corpus" / "lee_background.cor"
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
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    tok.save(str(path))
    return tok


def _encode_stream(encode_batch, docs: List[str], eos_id: int, max_tokens: int) -> np.ndarray:
    """Concatenate documents, each followed by EOS, into one token array."""
    ids: List[int] = []
    for start in range(0, len(docs), 256):
        for seq in encode_batch(docs[start:start + 256]):
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
            done.write_text(json.dumps({"vocab_size": vocab, "fingerprint": fp,
                                        "train_tokens": int(train.size), "val_tokens": int(val.size)}))
        meta = json.loads(done.read_text())
    return TokenizedCorpus(np.load(folder / "train.npy"), np.load(folder / "val.npy"),
                           meta["vocab_size"], meta["fingerprint"])


def load_corpus(data_cfg) -> TokenizedCorpus:
    if data_cfg.name == "local":
        return _load_local(data_cfg)
    if data_cfg.name == "c4":
        return _load_c4(data_cfg)
    raise ValueError(f"data.name={data_cfg.name!r}: allowed: local, c4")


def _load_local(data_cfg) -> TokenizedCorpus:
    # The texts are fixed by the Python version (pydoc, stdlib), the pinned gensim wheel and
    # the pinned packages' versions, so the key need not hash the texts themselves (reading
    # them takes a minute; the token arrays are cached, their hash is the fingerprint).
    sources = list(data_cfg.sources)
    versions = package_versions() if "package_docstrings" in sources else {}
    ident = json.dumps([sources, sys.version, data_cfg.vocab_size, data_cfg.val_fraction] + ([versions] if versions else []))
    key = "local-" + hashlib.sha1(ident.encode()).hexdigest()[:12]

    def build(folder: Path):
        log.info("building the local corpus from %s (once, cached in %s; the package docstrings take "
                 "~1-2 min to read and tokenize on 2 cores)", ", ".join(sources), folder)
        docs = load_local_documents(sources)
        train_docs = [d for d in docs if not is_validation(d, data_cfg.val_fraction)]
        val_docs = [d for d in docs if is_validation(d, data_cfg.val_fraction)]
        log.info("training a %d-token BPE tokenizer on %d documents (cached in %s)",
                 data_cfg.vocab_size, len(train_docs), folder)
        tok = train_bpe_tokenizer(train_docs, data_cfg.vocab_size, folder / "tokenizer.json")
        eos = tok.token_to_id(EOS)

        def encode(batch):
            return [e.ids for e in tok.encode_batch(batch)]

        big = 1 << 62
        return _encode_stream(encode, train_docs, eos, big), _encode_stream(encode, val_docs, eos, big), tok.get_vocab_size()

    return _cached(key, cache_root(data_cfg), build)


def _load_c4(data_cfg) -> TokenizedCorpus:
    try:
        import datasets
    except ImportError as e:  # datasets is optional at import time
        raise ImportError("data=c4 needs the datasets package: pip install datasets") from e
    from transformers import AutoTokenizer

    source = data_cfg.path or f"{data_cfg.hub_id}/{data_cfg.hub_config}"
    key = "c4-" + hashlib.sha1(json.dumps([source, data_cfg.tokenizer, data_cfg.max_train_tokens,
                                           data_cfg.max_val_tokens, data_cfg.text_field]).encode()).hexdigest()[:12]

    def build(folder: Path):
        if data_cfg.path:
            files = sorted(glob.glob(data_cfg.path))
            if not files:
                raise FileNotFoundError(f"data.path={data_cfg.path!r} matches no file")
            fmt = "parquet" if files[0].endswith(".parquet") else "json"
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            ds = datasets.load_dataset(fmt, data_files=files, split="train")
            train_rows = [r[data_cfg.text_field] for r in ds if not is_validation(r[data_cfg.text_field], data_cfg.val_fraction)]
            val_rows = [r[data_cfg.text_field] for r in ds if is_validation(r[data_cfg.text_field], data_cfg.val_fraction)]
        else:  # C4 has its own validation split; stream only what we need
            train_rows = _take_text(datasets.load_dataset(data_cfg.hub_id, data_cfg.hub_config, split="train", streaming=True),
                                    data_cfg.text_field, data_cfg.max_train_tokens)
            val_rows = _take_text(datasets.load_dataset(data_cfg.hub_id, data_cfg.hub_config, split="validation", streaming=True),
                                  data_cfg.text_field, data_cfg.max_val_tokens)
        tok = AutoTokenizer.from_pretrained(data_cfg.tokenizer)
        eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id

        def encode(batch):
            return tok(batch, add_special_tokens=False)["input_ids"]

        return (_encode_stream(encode, train_rows, eos, data_cfg.max_train_tokens),
                _encode_stream(encode, val_rows, eos, data_cfg.max_val_tokens), len(tok))

    return _cached(key, cache_root(data_cfg), build)


def _take_text(stream, field: str, max_tokens: int, chars_per_token: int = 4) -> List[str]:
    rows, chars = [], 0
    for row in stream:
        rows.append(row[field])
        chars += len(row[field])
        if chars >= max_tokens * chars_per_token:
            break
    return rows


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

    @functools.lru_cache(maxsize=4)
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
