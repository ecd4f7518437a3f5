"""Shared helpers: compose the real Hydra config with small overrides and run in-process."""

import json
import os
from pathlib import Path

import pytest
import torch

from mecefo_exp.config import validate
from mecefo_exp.config.hydra_glue import register_configs
from mecefo_exp.methods.run_context import run_context_members
from mecefo_exp.metrics import WALL_CLOCK_FIELDS

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
torch.set_num_threads(2)
register_configs()

# A model small enough that a 12-step run takes a second or two on two cores.
MICRO = [
    "model=llama_tiny",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_hidden_layers=2",
    "model.num_attention_heads=2",
    "data.seq_len=32",
    "data.micro_batch=2",
    "data.eval_blocks=8",
    "cluster.n_workers=4",
    "trainer.max_steps=12",
    "trainer.eval_every=6",
    "trainer.warmup_steps=2",
    "trainer.progress=none",
    # the small offline corpus (1.8 MB, built in seconds): the default adds ~22 MB of package
    # docstrings, which a fresh clone would spend minutes tokenizing
    "data.sources=[pydoc_topics,stdlib_docstrings,lee_background]",
]

# A pinned profile: the simulated clock of tests does not depend on this machine's speed.
FIXED_KERNELS = {
    "mb:normal": 0.010,
    "mb:forward": 0.0035,
    "optimizer": 0.001,
    "state_copy": 0.001,
    "checkpoint_save": 0.002,
    "neighbor_pair": 0.015,
}
#: the kernels MeCeFO adds at method.rank=8 (fixed_profile(MECEFO_RANK_8) pins its clock too)
MECEFO_RANK_8 = {
    "mb:mecefo[sa=1,rc=1,lr=1,r=8]": 0.012,
    "neighbor_pair[sa=1,rc=1,lr=1,r=8]": 0.016,
    "mecefo_svd[sa=1,rc=1,lr=1,r=8]": 0.004,
}


def tiny_model(seed=0):
    """A 2-layer, 32-wide LLaMA over a 257-token vocabulary, built without Hydra."""
    from omegaconf import OmegaConf

    from mecefo_exp.numerics.model import build_model

    cfg = OmegaConf.create(
        dict(
            vocab_size=None,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=2,
            num_key_value_heads=None,
            num_hidden_layers=2,
            max_position_embeddings=64,
            rms_norm_eps=1e-6,
            initializer_range=0.02,
            attn_implementation="sdpa",
        )
    )
    return build_model(cfg, vocab_size=257, seed=seed)


def tiny_stream(n_workers, micro_batch, seq_len):
    """A SampleStream over 5,000 random tokens of tiny_model's vocabulary."""
    import numpy as np

    from mecefo_exp.data import SampleStream

    rng = np.random.default_rng(0)
    return SampleStream(rng.integers(0, 257, size=5000).astype(np.int32), seq_len, micro_batch, n_workers, seed=3)


def compose_cfg(overrides=()):
    """The config `python run.py <overrides>` runs, not yet checked (a test checks it, or expects it refused)."""
    from mecefo_exp import api

    return api.compose(overrides, check=False)


@pytest.fixture
def fixed_profile(tmp_path):
    def make(extra=None):
        path = tmp_path / "fixed_profile.json"
        kernels = dict(FIXED_KERNELS)
        kernels.update(extra or {})
        path.write_text(json.dumps({"kernels": kernels, "meta": {"fixed": True}}))
        return str(path)

    return make


@pytest.fixture
def run_exp(tmp_path):
    """Run an experiment in-process with MICRO + overrides; returns (summary, run_dir)."""
    from mecefo_exp.run.experiment import Experiment

    counter = {"n": 0}

    def run(*overrides, micro=True):
        cfg = compose_cfg((MICRO if micro else []) + list(overrides))
        validate(cfg)
        counter["n"] += 1
        run_dir = tmp_path / f"run{counter['n']}"
        summary = Experiment(cfg, run_dir).run()
        return summary, run_dir

    return run


def run_py(*args, timeout=120):
    """`python run.py <args>` started as a user starts it, from the checkout: the finished process
    and its stderr's non-empty lines (a refusal is one of them)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return out, [ln for ln in out.stderr.splitlines() if ln.strip()]


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def losses_by_step(run_dir):
    """The loss of each committed step: the last row of each step (replays overwrite)."""
    out = {}
    for row in read_jsonl(Path(run_dir) / "metrics.jsonl"):
        out[row["step"]] = row["loss"]
    return out


# what legitimately differs between a resumed and an uninterrupted run's summary
VOLATILE_SUMMARY = {*WALL_CLOCK_FIELDS, "run_dir", "resumes", "updated_at"}


def run_records(run_dir):
    """A run's streams as a resumed run must reproduce them: metrics without wall-clock fields,
    eval, events without the resume's own event, grad_error (empty where absent)."""
    out = {}
    for name in ("metrics", "eval", "events", "grad_error"):
        path = Path(run_dir) / f"{name}.jsonl"
        rows = read_jsonl(path) if path.exists() else []
        if name == "metrics":
            rows = [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in rows]
        if name == "events":
            rows = [r for r in rows if r["kind"] != "resume"]
        out[name] = rows
    return out


class StrictRun:
    """The run as a method sees it, with every member outside RunContext refused (methods/base.py);
    the members read land in `seen`."""

    MEMBERS = run_context_members()

    def __init__(self, run, seen):
        object.__setattr__(self, "_run", run)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name):
        if name not in self.MEMBERS:
            raise AssertionError(f"a method read run.{name}, which RunContext does not declare")
        self._seen.add(name)
        return getattr(self._run, name)

    def __setattr__(self, name, value):
        if name not in self.MEMBERS:
            raise AssertionError(f"a method set run.{name}, which RunContext does not declare")
        setattr(self._run, name, value)


# runs/ stays clean: the session fails when the tests left anything new under the checkout's
# runs/ (tests/runs_guard.py; under pytest-xdist the controller alone checks)
from runs_guard import pytest_sessionfinish, pytest_sessionstart  # noqa: E402,F401
