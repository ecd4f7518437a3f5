"""Run folders -> one pandas table.

    python -m analysis.collect runs/ [more dirs] --out analysis/out

A run folder is any folder holding summary.json or .hydra/config.yaml (the contract in
docs/DESIGN.md, "What a run leaves behind"). Every folder found is listed:

- status comes from summary.json (ok | failed | running); a folder without summary.json
  is `incomplete`, one whose summary.json cannot be parsed, or holds something other than a
  number where the tables read one (NUMERIC_FIELDS), is `unreadable`. A `running`
  run that is no longer running was killed.
- Config columns (model, method, failure, seed, n_workers, max_steps, micro_batch,
  seq_len) come from the run's own resolved config: <run>/config.yaml, written once when
  the run starts (a resume does not rewrite it), else .hydra/config.yaml, else
  summary.json; summary fields follow, time_breakdown flattened as time_<category> (any
  other dict as <key>_<sub>).
- A run's identity is its whole resolved config except the seed and the settings that
  cannot change its numbers (IDENTITY_EXCLUDE: logging, progress, threads, crash-safety checkpoints, paths of
  caches; a failure-free run's failure-reading keys), plus the clock's fingerprint
  (summary.json's `clock.fingerprint`) where the config does not determine the clock: a
  measured profile or a `cluster.profile` file (CONFIG_FREE_CLOCKS). A FLOP or table clock
  follows from the config alone; its fingerprint also counts each method's own kernels
  (MeCeFO's neighbour pass), so counting it would split the methods of one sweep into
  settings of their own. Runs of one identity are seeds of one
  configuration. `variant` and `failure_variant` name, as `key=value` lists, the settings
  that tell the collected runs apart beyond the columns above (`method.rank=8`,
  `failure.repair=replace`): a sweep over any key gives one row per value in the tables.
  A key implied by its group's name (model.hidden_size by model.name) is not repeated.
- De-duplication on DEDUP_KEY = (label, identity, seed): of the runs sharing a key the
  newest `ok` one is kept (newest = latest modification time of its record files); if
  none is ok, the newest run of any status is kept, so a configuration that only ever
  failed stays visible as failed. `label` names the folder a run was collected from when
  the CLI is given `--label NAME=DIR` (two sweeps compared side by side), else "".

Files written to --out: runs.parquet + runs.csv (de-duplicated, one row per key) and
runs_all.parquet + runs_all.csv (every folder found; `superseded_by` names the kept run
of a dropped duplicate). Nothing is dropped silently: the CLI prints what it found.

The same module reads a run's jsonl files for the plots: `committed` keeps the last row
of each step (rolled-back steps are replayed and logged again).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

import pandas as pd

from mecefo_exp.bounded_read import InputRefused, open_bounded, read_text_bounded

from .methods import METHOD_ORDER

log = logging.getLogger(__name__)

CONFIG_COLUMNS = ("model", "method", "failure", "seed", "n_workers", "max_steps", "micro_batch", "seq_len")
#: where each config column lives in the resolved config (.hydra/config.yaml)
CONFIG_PATHS = {
    "model": ("model", "name"),
    "method": ("method", "name"),
    "failure": ("failure", "name"),
    "seed": ("seed",),
    "n_workers": ("cluster", "n_workers"),
    "max_steps": ("trainer", "max_steps"),
    "micro_batch": ("data", "micro_batch"),
    "seq_len": ("data", "seq_len"),
}
DEDUP_KEY = ("label", "identity", "seed")
#: settings that cannot change a run's numbers: left out of its identity (prefixes end in ".")
IDENTITY_EXCLUDE = (
    "seed",
    "resume",
    "experiment",
    "hydra.",
    "logger.",
    "trainer.progress",
    "trainer.log_every",
    "trainer.log_events",
    "trainer.resume_every",
    "trainer.threads",
    "trainer.event_driven",
    "cluster.profile",
    "cluster.profile_warmup",
    "cluster.profile_repeats",
    "data.cache_dir",
)
#: method settings that act only on a degraded step (MeCeFO's neighbour): a failure-free run is
#: the same whatever they are, so they belong with the failure reading (`failure_variant`), and
#: one failure-free run is the baseline of every value (the ablation, method.rank, ...)
UNDER_FAILURE_ONLY = (
    "method.skip_attention",
    "method.recompute_ffn",
    "method.lowrank_ffn",
    "method.rank",
    "method.svd_every",
    "method.lowrank_modules",
    "method.grad_error_every",
)
#: columns that already name a setting; `variant` lists the other distinguishing keys
NAMED_KEYS = {".".join(p): c for c, p in CONFIG_PATHS.items()}
#: the failure levels of the paper, in order; other presets (poisson, trace, ...) sort after
FAILURE_ORDER = ("none", "low", "medium", "high")
TIME_CATEGORIES = ("compute", "comm", "ft_overhead", "lost_work", "stall", "degraded_extra")
RECORD_FILES = ("summary.json", "metrics.jsonl", "eval.jsonl", "events.jsonl", ".hydra/config.yaml")
SKIP_DIRS = {".hydra", "checkpoints", "__pycache__", ".git", "wandb"}
#: summary.json fields the tables compute with; a run where one of them is not a number
#: (a hand-edited or foreign record) is listed as `unreadable`, naming the field, not averaged
NUMERIC_FIELDS = (
    "seed",
    "n_workers",
    "max_steps",
    "steps",
    "tokens_committed",
    "tokens_processed",
    "sim_time_s",
    "wall_time_s",
    "throughput_tok_s",
    "achieved_tflops_s",
    "mfu",
    "final_val_loss",
    "final_val_ppl",
    "failures",
    "rollbacks",
    "lost_steps",
    "interrupted_steps",
    "failures_expected",
    "mean_workers_down_expected",
    "mean_workers_down",
    "outage_s",
)
NUMERIC_BLOCKS = ("time_breakdown", "window")
#: the largest number a numeric field may hold: above it a record is foreign or hand-edited (the
#: largest real ones, tokens of a frontier run, are about 1e13); so is NaN, infinity or a negative
LARGEST_NUMBER = 1e30
#: the bound on each file read from a run folder, checked before reading (a FIFO, a link to
#: /dev/zero or a file of gigabytes would hang or exhaust memory): a summary or config of a few kB,
#: jsonl streams and trace.csv of a long run in the tens of MB
MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_STREAM_BYTES = 1024 * 1024 * 1024
#: summary.json's `clock.compute` values whose seconds come from somewhere the config does not
#: spell out (this machine's timings, a profile file): their fingerprint is part of a run's identity
CONFIG_FREE_CLOCKS = ("measured", "profile_file")


# ------------------------------------------------------------------------ reading
def read_jsonl(path: Path) -> pd.DataFrame:
    """Rows of a jsonl file; a missing file is empty, a torn last line (a killed run) is skipped."""
    path = Path(path)
    rows = []
    if not path.exists():
        return pd.DataFrame()
    try:  # a line in another encoding is not JSON: skipped
        f = open_bounded(path, MAX_STREAM_BYTES, encoding="utf-8", errors="replace")
    except (InputRefused, OSError) as e:
        log.warning("%s, skipped", e)
        return pd.DataFrame()
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("%s:%d: not JSON, skipped (a run killed mid-write?)", path, n)
    return pd.DataFrame(rows)


def committed(df: pd.DataFrame, key: str = "step") -> pd.DataFrame:
    """The last row of each step: a rolled-back step is replayed and logged again."""
    if df.empty or key not in df:
        return df
    return df.drop_duplicates(subset=key, keep="last").sort_values(key).reset_index(drop=True)


def load_eval(run_dir) -> pd.DataFrame:
    return committed(read_jsonl(Path(run_dir) / "eval.jsonl"))


def load_metrics(run_dir) -> pd.DataFrame:
    return committed(read_jsonl(Path(run_dir) / "metrics.jsonl"))


def load_events(run_dir) -> pd.DataFrame:
    return read_jsonl(Path(run_dir) / "events.jsonl")


def load_grad_error(run_dir) -> pd.DataFrame:
    """MeCeFO's gradient-error rows (step, sim_time_s, rel_error, ...); empty when absent."""
    return committed(read_jsonl(Path(run_dir) / "grad_error.jsonl"))


def workers_down(run_dir, until: Optional[float] = None) -> pd.DataFrame:
    """Workers down over simulated time as a step function: columns time_s, down.

    From events.jsonl's fail/recover rows (at the trace time the event happened, when the
    row carries it); without them from trace.csv (time_s, worker, event), cut at `until`.
    Starts at (0, 0); ends at `until` when given.
    """
    run_dir = Path(run_dir)
    changes: List[tuple] = []
    events = load_events(run_dir)
    if not events.empty and "kind" in events:
        rows = events[events["kind"].isin(["fail", "recover"])]
        for _, r in rows.iterrows():
            detail = r.get("detail")
            t = detail.get("trace_time_s") if isinstance(detail, dict) else None
            t = r["sim_time_s"] if t is None else t
            count = detail.get("workers", 1) if isinstance(detail, dict) and detail.get("job") else 1  # job-wide
            changes.append((float(t), count if r["kind"] == "fail" else -count))
    elif (run_dir / "trace.csv").exists():
        try:
            with open_bounded(run_dir / "trace.csv", MAX_STREAM_BYTES, encoding="utf-8", errors="replace") as f:
                trace = pd.read_csv(f)
        except (pd.errors.EmptyDataError, pd.errors.ParserError, InputRefused, OSError):
            trace = pd.DataFrame()
        if {"time_s", "event"} <= set(trace.columns):
            for t, ev in zip(trace["time_s"], trace["event"]):
                if until is None or t <= until:
                    changes.append((float(t), 1 if ev == "fail" else -1))
    changes.sort(key=lambda c: c[0])
    times, down, level = [0.0], [0], 0
    for t, d in changes:
        level = max(0, level + d)
        times.append(t)
        down.append(level)
    if until is not None and until > times[-1]:
        times.append(float(until))
        down.append(level)
    return pd.DataFrame({"time_s": times, "down": down})


def _read_yaml(path: Path) -> Optional[dict]:
    import yaml

    try:
        data = yaml.safe_load(read_text_bounded(path, MAX_RECORD_BYTES))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: not UTF-8, or not a bounded regular file
        log.warning("%s: %s", path, e)
        return None


def run_config(run_dir: Path) -> Optional[dict]:
    """The run's own resolved config.yaml (what resume reuses); .hydra/config.yaml only when it is
    missing, since a resume can rewrite the Hydra copy."""
    for path in (Path(run_dir) / "config.yaml", Path(run_dir) / ".hydra" / "config.yaml"):
        if path.exists():
            cfg = _read_yaml(path)
            if cfg:
                return cfg
    return None


def flatten_config(cfg: Optional[dict], prefix: str = "") -> Dict[str, object]:
    """{"method.rank": 64, ...}: every leaf of a nested config; lists as JSON text."""
    out: Dict[str, object] = {}
    for k, v in (cfg or {}).items():
        if isinstance(v, dict):
            out.update(flatten_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (list, tuple)) else v
    return out


def identity_config(flat: Dict[str, object]) -> Dict[str, object]:
    """The settings that define what a run computes (see the module doc), seed excluded."""

    def excluded(key: str) -> bool:
        return any(key == e or (e.endswith(".") and key.startswith(e)) for e in IDENTITY_EXCLUDE)

    out = {k: v for k, v in flat.items() if not excluded(k)}
    if out.get("failure.name") == "none":  # no failure happens: how failures would be read (or met) is moot
        out = {
            k: v
            for k, v in out.items()
            if (not k.startswith("failure.") or k == "failure.name") and k not in UNDER_FAILURE_ONLY
        }
    return out


def dig(cfg: dict, path: Sequence[str]):
    cur = cfg
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def _flatten(summary: dict) -> dict:
    out = {}
    for k, v in summary.items():
        if k == "time_breakdown" and isinstance(v, dict):
            out.update({f"time_{c}": x for c, x in v.items()})
        elif isinstance(v, dict):
            out.update({f"{k}_{c}": x for c, x in v.items()})
        elif isinstance(v, (list, tuple)):
            out[k] = json.dumps(v)
        else:
            out[k] = v
    return out


def not_a_number(summary: dict) -> Optional[str]:
    """The first field the tables read as a number that holds something else, or a number no run
    writes (NaN, infinite, negative, above LARGEST_NUMBER: a run writes NaN as null), as
    `field is 'value'`."""

    def bad(value) -> Optional[str]:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number"
        if value != value or value in (math.inf, -math.inf):
            return "not a finite number"
        if value < 0:
            return "negative"
        if value > LARGEST_NUMBER:
            return f"above {LARGEST_NUMBER:g}"
        return None

    def show(value) -> str:
        text = repr(value)
        return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"

    for key in NUMERIC_FIELDS:
        why = bad(summary.get(key))
        if why:
            return f"{key} is {show(summary[key])}, {why}"
    for block in NUMERIC_BLOCKS:
        if isinstance(summary.get(block), dict):
            for key, value in summary[block].items():
                why = bad(value)
                if why:
                    return f"{block}.{key} is {show(value)}, {why}"
    return None


def _mtime(run_dir: Path) -> float:
    times = [(run_dir / f).stat().st_mtime for f in RECORD_FILES if (run_dir / f).exists()]
    return max(times) if times else run_dir.stat().st_mtime


def load_run(run_dir) -> Dict[str, object]:
    """One row for one run folder, whatever state it was left in."""
    run_dir = Path(run_dir)
    row: Dict[str, object] = {"run_dir": str(run_dir.resolve())}
    summary: Optional[dict] = None
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        try:  # a regular file of bounded size only: a FIFO would hang, /dev/zero would fill the memory
            summary = json.loads(read_text_bounded(summary_path, MAX_RECORD_BYTES))
            row["status"] = summary.get("status", "unknown") if isinstance(summary, dict) else "unreadable"
        except (OSError, ValueError, RecursionError) as e:  # not JSON, not UTF-8, too large, not a file
            row["status"] = "unreadable"
            row["error"] = f"summary.json: {' '.join(str(e).split())[:300]}"
            summary = None
        wrong = not_a_number(summary) if isinstance(summary, dict) else None
        if wrong:
            row["error"] = f"summary.json: {wrong}; skipped"
            summary = {"status": "unreadable"}
            row["status"] = "unreadable"
    else:
        row["status"] = "incomplete"
    cfg = run_config(run_dir)
    if isinstance(summary, dict):
        flat = _flatten(summary)
        flat.pop("status", None)
        flat.pop("run_dir", None)  # the folder may have moved since; ours is the truth
        row.update(flat)
    for col in CONFIG_COLUMNS:
        value = dig(cfg, CONFIG_PATHS[col]) if cfg else None
        if value is not None:
            row[col] = value
        elif col not in row:
            row[col] = None
    if cfg:
        row["experiment"] = cfg.get("experiment")
    ident = (
        identity_config(flatten_config(cfg))
        if cfg
        else {".".join(CONFIG_PATHS[c]): row.get(c) for c in CONFIG_COLUMNS if c != "seed"}
    )
    fingerprint = row.get("clock_fingerprint") if row.get("clock_compute") in CONFIG_FREE_CLOCKS else None
    row["_config"] = {**ident, "clock.profile": fingerprint} if fingerprint else ident
    row["identity"] = json.dumps(row["_config"], sort_keys=True, default=str)
    overrides = run_dir / ".hydra" / "overrides.yaml"
    if overrides.exists():
        ov = _read_yaml_list(overrides)
        row["overrides"] = ",".join(ov) if ov else ""
    if row["status"] != "ok":
        # what the record shows of an unfinished run
        metrics = load_metrics(run_dir)
        # an event-driven numerics-free run logs one row per run of equal steps (first_step..step)
        row["steps_logged"] = int(metrics["step"].max()) + 1 if "first_step" in metrics else int(len(metrics))
        if not metrics.empty and "sim_time_s" in metrics and row.get("sim_time_s") is None:
            row["sim_time_s"] = float(metrics["sim_time_s"].iloc[-1])
    row["mtime"] = _mtime(run_dir)
    return row


def _read_yaml_list(path: Path) -> List[str]:
    import yaml

    try:
        data = yaml.safe_load(read_text_bounded(path, MAX_RECORD_BYTES))
    except (OSError, ValueError, yaml.YAMLError):
        return []
    return [str(x) for x in data] if isinstance(data, list) else []


def find_run_dirs(roots: Iterable) -> Iterator[Path]:
    """Folders holding summary.json or .hydra/config.yaml, below (or equal to) each root."""
    seen = set()
    for root in roots:
        root = Path(root)
        if not root.exists():
            log.warning("%s does not exist, skipped", root)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            if "summary.json" in filenames or (here / ".hydra" / "config.yaml").exists():
                key = here.resolve()
                if key not in seen:
                    seen.add(key)
                    yield here
                dirnames[:] = []  # a run folder holds no other run
                continue
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)


# ------------------------------------------------------------------------ the table
def _arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Columns that mix types (a knob that is an int in one run and "auto" in another)
    become strings, so that parquet can store them."""
    import pyarrow as pa

    df = df.copy()
    for col in df.columns:
        try:
            pa.array(df[col], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            df[col] = df[col].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    return df


def deduplicate(df: pd.DataFrame, key: Sequence[str] = DEDUP_KEY) -> pd.DataFrame:
    """Mark each run `selected` (kept) or `superseded_by` the kept run of its key."""
    df = df.copy()
    df["selected"] = False
    df["superseded_by"] = None
    if df.empty:
        return df
    df["_ok"] = df["status"] == "ok"
    for _, group in df.groupby(list(key), dropna=False, sort=False):
        best = group.sort_values(["_ok", "mtime"], ascending=[False, False]).index[0]
        df.loc[best, "selected"] = True
        others = group.index.drop(best)
        df.loc[others, "superseded_by"] = df.loc[best, "run_dir"]
    return df.drop(columns="_ok")


def _label(key: str, value) -> str:
    return f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"


def distinguishing_keys(configs: Sequence[Dict[str, object]]) -> List[str]:
    """The keys whose values tell these configs apart, less those implied by their group's
    name: model.hidden_size differs between llama_tiny and llama_1b runs, but it is listed
    only if it also differs between two runs of one model.name. A config without the key
    (a failure-free run has no method.rank in its identity) does not count as a value."""

    def norm(v) -> str:
        return json.dumps(v, sort_keys=True, default=str)

    keys = sorted({k for c in configs for k in c})
    out = []
    for key in keys:
        if len({norm(c[key]) for c in configs if key in c}) < 2:
            continue
        name_key = key.split(".", 1)[0] + ".name"
        if "." in key and key != name_key and any(name_key in c for c in configs):
            within: Dict[str, set] = {}
            for c in configs:
                if key in c:
                    within.setdefault(norm(c.get(name_key)), set()).add(norm(c[key]))
            if all(len(v) < 2 for v in within.values()):
                continue
        out.append(key)
    return out


def add_variants(df: pd.DataFrame) -> pd.DataFrame:
    """`variant` (other keys) and `failure_variant` (failure.* keys and UNDER_FAILURE_ONLY): what
    tells a run apart from the others collected with it beyond the named columns, as "k=v,k=v"."""
    df = df.copy()
    configs = [c if isinstance(c, dict) else {} for c in df["_config"]]
    keys = [k for k in distinguishing_keys(configs) if k not in NAMED_KEYS]
    variant, failure_variant = [], []
    for c in configs:
        present = [(k, c[k]) for k in keys if c.get(k) is not None]
        under_failure = [(k, v) for k, v in present if k.startswith("failure.") or k in UNDER_FAILURE_ONLY]
        variant.append(",".join(_label(k, v) for k, v in present if (k, v) not in under_failure))
        failure_variant.append(",".join(_label(k, v) for k, v in under_failure))
    df["variant"], df["failure_variant"] = variant, failure_variant
    return df


def collect(
    roots: Iterable, key: Sequence[str] = DEDUP_KEY, keep_all: bool = True, labels: Optional[Dict[str, Sequence]] = None
) -> pd.DataFrame:
    """Every run folder under `roots` as one table, with `selected` / `superseded_by`.

    labels={"before": [dir], "after": [dir]} collects each group under its label (column
    `label`), so two sweeps of the same configurations stay side by side; `roots` are
    collected with label "". keep_all=False returns only the kept rows.
    """
    groups = {"": list(roots)} if roots else {}
    groups.update(labels or {})
    rows = [{**load_run(d), "label": name} for name, dirs in groups.items() for d in find_run_dirs(dirs)]
    lead = ["run_dir", "status", *CONFIG_COLUMNS]
    if not rows:
        df = pd.DataFrame(columns=[*lead, "label", "identity", "variant", "failure_variant", "mtime"])
    else:
        df = add_variants(pd.DataFrame(rows)).drop(columns="_config")
    rest = [c for c in df.columns if c not in lead]
    df = df[lead + rest]
    df["mtime"] = pd.to_numeric(df["mtime"])
    df = deduplicate(df, key)
    df = sort_runs(df).reset_index(drop=True)
    if not keep_all:
        df = df[df["selected"]].reset_index(drop=True)
    return df


def _order(values: pd.Series, order: Sequence[str]) -> pd.Series:
    rank = {v: i for i, v in enumerate(order)}
    return values.map(lambda v: rank.get(v, len(order)))


def sort_runs(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    keys = pd.DataFrame(
        {
            "m": df["model"].astype(str),
            "me": _order(df["method"], METHOD_ORDER),
            "men": df["method"].astype(str),
            "f": _order(df["failure"], FAILURE_ORDER),
            "fn": df["failure"].astype(str),
            "s": pd.to_numeric(df["seed"], errors="coerce"),
            "t": df["mtime"],
        },
        index=df.index,
    )
    return df.loc[keys.sort_values(list(keys.columns), na_position="last").index]


def ok_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The rows the tables and figures use: kept and finished."""
    if df.empty:
        return df
    sel = df["selected"] if "selected" in df else True
    return df[sel & (df["status"] == "ok")]


def write_table(df: pd.DataFrame, out: Path) -> Dict[str, Path]:
    """runs.{parquet,csv} (de-duplicated) and runs_all.{parquet,csv} (every folder)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kept = df[df["selected"]] if "selected" in df else df
    paths = {}
    for name, table in (("runs", kept), ("runs_all", df)):
        safe = _arrow_safe(table.reset_index(drop=True))
        paths[f"{name}.parquet"] = out / f"{name}.parquet"
        safe.to_parquet(paths[f"{name}.parquet"], index=False)
        paths[f"{name}.csv"] = out / f"{name}.csv"
        table.to_csv(paths[f"{name}.csv"], index=False)
    return paths


def read_table(out) -> pd.DataFrame:
    """The de-duplicated table that `collect` wrote (parquet, else CSV)."""
    out = Path(out)
    if (out / "runs.parquet").exists():
        return pd.read_parquet(out / "runs.parquet")
    return pd.read_csv(out / "runs.csv")


def describe(df: pd.DataFrame) -> str:
    """What was found, in a few lines: counts by status, and every run that is not ok."""
    if df.empty:
        return "no run folders found"
    kept = df[df["selected"]]
    counts = kept["status"].value_counts().to_dict()
    lines = [
        f"{len(df)} run folders, {len(kept)} after de-duplication (one per configuration and seed): "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
    ]
    superseded = int((~df["selected"]).sum())
    if superseded:
        lines.append(f"{superseded} superseded by a newer or ok run of the same key (listed in runs_all.csv)")
    for _, r in kept[kept["status"] != "ok"].iterrows():
        err = r.get("error")
        err = f": {err}" if isinstance(err, str) and err else ""
        extra = " ".join(str(r.get(c) or "") for c in ("variant", "failure_variant")).strip()
        extra = f" {extra}" if extra else ""
        lines.append(
            f"  {r['status']:10s} {r['method']} failure={r['failure']}{extra} seed={r['seed']} -> {r['run_dir']}{err}"
        )
    return "\n".join(lines)


def add_label_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="collect DIR under the label NAME (repeatable): --label before=runs/a --label after=runs/b "
        "puts two sweeps side by side in every table",
    )


def parse_labels(parser: argparse.ArgumentParser, items: Sequence[str]) -> Dict[str, List[str]]:
    labels: Dict[str, List[str]] = {}
    for item in items:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            parser.error(f"--label {item!r}: expected NAME=DIR, e.g. --label before=runs/sweeps/a")
        if name in labels and folder not in labels[name]:
            # two sweeps under one name would be averaged as seeds of one configuration
            parser.error(
                f"--label {item!r}: the label {name!r} already names {labels[name][0]}; one folder per "
                "label (give each folder its own name)"
            )
        labels.setdefault(name, [folder])
    return labels


def roots_and_labels(parser: argparse.ArgumentParser, args, default: Sequence[str] = ()):
    """(roots, {label: [dirs]}) from the `roots` positional and --label options; `default`
    roots when neither is given, else an error naming what to give."""
    labels = parse_labels(parser, args.label)
    roots = list(args.roots) or ([] if labels else list(default))
    if not roots and not labels:
        parser.error("give folders to search, or --label NAME=DIR")
    return roots, labels


def parse_analysis_args(
    prog: str, doc: str, roots_help: str, argv: Optional[Sequence[str]] = None, default_roots: Sequence[str] = ()
):
    """The command line every `python -m analysis...` entry shares: run folders, --label,
    --out, --no-figures. Returns (args, roots, labels)."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("roots", nargs="*", help=roots_help)
    add_label_argument(p)
    p.add_argument("--out", default="analysis/out", help="output folder (default: analysis/out)")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    args = p.parse_args(argv)
    roots, labels = roots_and_labels(p, args, default=default_roots)
    return args, roots, labels


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.collect", description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="*", help="folders to search for run folders (runs/, a sweep folder, ...)")
    add_label_argument(p)
    p.add_argument("--out", default="analysis/out", help="where runs.parquet / runs.csv go (default: analysis/out)")
    args = p.parse_args(argv)
    roots, labels = roots_and_labels(p, args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    df = collect(roots, labels=labels)
    paths = write_table(df, Path(args.out))
    print(describe(df))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
