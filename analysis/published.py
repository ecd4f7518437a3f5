"""The tables published in RESULTS.md: their fingerprints, and how to regenerate and check them.

A published number is only worth what its provenance is. Each regenerable table in RESULTS.md
sits under a marker naming the study and the table file it comes from:

    <!-- table paper_mini throughput.md -->
    | model | method | ... |

(optionally `rows=REGEX`: only the rows that match, the header always), and each study has one
fingerprint line:

    - **Fingerprints** (`paper_mini`): data `f3050ff3fc14`, clock `0a1b2c3d4e5f`; Python 3.11.2, torch 2.13.0+cpu.

`data` is the hash of the corpus's tokens (`none` where the study trains on nothing), `clock` the
hash of every configuration's clock fingerprint (the kernel seconds, links and stalls that the
simulated clock charges). Both are recomputed from the current code by `fingerprints()`,
which runs each configuration of the study numerics-free for one step: tests/test_published.py
fails when they differ from RESULTS.md, so a change to the corpus or the clock must regenerate
the tables (or mark them superseded) in the same commit.

    python -m analysis.published fingerprints [STUDY ...]      # what the current code gives
    python -m analysis.published regenerate --out DIR [--write] # rerun, diff against RESULTS.md
    make results                                                 # the same, into a scratch folder

`regenerate` reruns every study (paper-mini: 28 runs with numerics; paper-table2: 318
numerics-free runs; the ablation's memory table: 12 numerics-free runs; the frontier sweep; the
decision map, its own command's output, `python -m analysis.decision_map`; `--sweep
decision_map=DIR` reads a finished one), renders each marked table from the fresh runs, prints
`identical` or a diff per table, ends with what it does not regenerate (NOT_REGENERATED) and
exits 1 when anything differs. BENCHMARKS.md says how long each study takes.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import paper
from .methods import METHOD_ORDER

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "RESULTS.md"
METHODS = METHOD_ORDER

TABLE_MARKER = re.compile(r"^<!-- table (?P<study>\w+) (?P<file>[\w.]+)(?: rows=(?P<rows>.+?))? -->$")
FINGERPRINT_LINE = re.compile(
    r"\*\*Fingerprints\*\* \(`(?P<study>\w+)`\): data `(?P<data>\w+)`, clock `(?P<clock>\w+)`; "
    r"Python (?P<python>[\w.+]+), torch (?P<torch>[\w.+]+)\."
)

# one step, no evaluation, numerics off, no failures: what a configuration's clock and corpus are
PROBE = [
    "trainer.numerics=false",
    "trainer.max_steps=1",
    "trainer.eval_every=0",
    "failure=none",
    "trainer.progress=none",
    "logger=none",
]


@dataclass
class Study:
    """A published study: how its sweep is run, which configurations its clock fingerprint
    covers, and (for tables that are not a sweep's analysis) how its tables are made."""

    name: str
    command: List[str]  # run.py arguments of the sweep (without hydra.sweep.dir)
    configs: Callable[[], Dict[str, List[str]]]  # label -> run.py overrides, one per distinct clock
    tables_from_runs: Optional[Callable[[Path], Dict[str, str]]] = None  # run folders -> {file: markdown}
    trains: bool = True  # numerics on: the corpus's fingerprint is part of its provenance
    notes: List[str] = field(default_factory=list)
    own_tables: Optional[Callable[[Path], Dict[str, str]]] = None  # its own command writes <folder>/tables/*.md


def _paper_mini_configs() -> Dict[str, List[str]]:
    return {m: ["experiment=paper_mini", f"method={m}"] for m in METHODS}


def _paper_table2_configs() -> Dict[str, List[str]]:
    """Every model cell of the experiment (its first CellSweeper group) x every method: the failure
    readings of the sweep share these clocks, the bandwidth grid varies one link of MeCeFO's."""
    from omegaconf import OmegaConf

    preset = OmegaConf.load(ROOT / "conf" / "experiment" / "paper_table2.yaml")
    models = [list(cell) for cell in preset.hydra.sweeper.groups[0]]
    bandwidths = [str(o) for cell in preset.hydra.sweeper.groups[1] for o in cell if "inter_node_GBps" in str(o)]
    configs = {}
    for cell in models:
        model = next(o.split("=", 1)[1] for o in cell if o.startswith("model="))
        for m in METHODS:
            configs[f"{model}/{m}"] = ["experiment=paper_table2", *cell, f"method={m}"]
        for sweep in bandwidths:  # "hardware.inter_node_GBps=3.125,6.25,..."
            key, values = sweep.split("=", 1)
            for v in values.split(","):
                configs[f"{model}/{paper.METHOD}/{v}GBps"] = [
                    "experiment=paper_table2",
                    *cell,
                    f"method={paper.METHOD}",
                    f"{key}={v}",
                ]
    return configs


# The ablation's memory and FLOP side: (model, micro-batch) x which techniques are switched off
ABLATION_SHAPES = [("llama_1b", 32, "all"), ("llama_7b", 16, "all"), ("llama_7b", 32, "ends")]
ABLATION_SWITCHES = [
    ("all three", []),
    ("no skip-attention", ["method.skip_attention=false"]),
    ("no FFN recompute", ["method.recompute_ffn=false"]),
    ("no low-rank FFN grads", ["method.lowrank_ffn=false"]),
    ("none (naive)", ["method.skip_attention=false", "method.recompute_ffn=false", "method.lowrank_ffn=false"]),
]
ABLATION_BASE = [
    "hardware=a100_32",
    "trainer.numerics=false",
    "cluster.n_workers=32",
    "data.seq_len=256",
    "trainer.max_steps=50",
    "trainer.eval_every=0",
    "failure=none",
    f"method={paper.METHOD}",
    "hardware.shard=optimizer",
    "trainer.progress=none",
]


def _ablation_configs() -> Dict[str, List[str]]:
    configs = {}
    for model, micro, which in ABLATION_SHAPES:
        switches = ABLATION_SWITCHES if which == "all" else [ABLATION_SWITCHES[0], ABLATION_SWITCHES[-1]]
        for label, extra in switches:
            configs[f"{model}/{micro}/{label}"] = [
                *ABLATION_BASE,
                f"model={model}",
                f"data.micro_batch={micro}",
                *extra,
            ]
    return configs


def _ablation_tables(runs: Path) -> Dict[str, str]:
    """The memory and FLOP table of the ablation from its run folders (one per configuration)."""
    rows = [
        "| model, micro-batch per GPU | techniques on | neighbour peak GB | fits 80 GB | normal worker peak GB "
        "| neighbour / normal FLOPs |",
        "|---|---|---:|---|---:|---:|",
    ]
    for label in _ablation_configs():
        model, micro, switches = label.split("/", 2)
        summary = json.loads((runs / _folder_name(label) / "summary.json").read_text())
        mem, clock = summary["memory"], summary["clock"]
        peak, fits = mem["peak_GB"], mem["fits"]
        normal = f"{peak['normal']:.1f}" + ("" if fits["normal"] else " (no)")
        size = model.replace("llama_", "").upper()
        rows.append(
            f"| {size}, {micro} | {switches} | {peak['neighbour']:.1f} | {'yes' if fits['neighbour'] else 'no'} "
            f"| {normal} | {clock['flop_ratio_neighbour_normal']:.3f} |"
        )
    return {"ablation_memory.md": "\n".join(rows)}


def _frontier_configs() -> Dict[str, List[str]]:
    return {m: ["experiment=llama3_405b", f"method={m}"] for m in METHODS}


def _decision_map_configs() -> Dict[str, List[str]]:
    from .decision_map import MODELS
    from .simulate import METHODS as MAPPED  # the methods the published map was swept with

    return {
        f"{model}/{m}": ["experiment=decision_map", *spec["overrides"], "cluster.n_workers=4096", f"method={m}"]
        for model, spec in MODELS.items()
        for m in MAPPED
    }


def _decision_map_tables(folder: Path) -> Dict[str, str]:
    from .decision_map import main as decision_map

    if decision_map(["--out", str(folder), "--no-figures"]) != 0:
        raise SystemExit("the decision map did not finish")
    return {p.name: p.read_text() for p in sorted((folder / "tables").glob("*.md"))}


STUDIES: Dict[str, Study] = {
    "paper_mini": Study("paper_mini", ["experiment=paper_mini"], _paper_mini_configs),
    "paper_table2": Study("paper_table2", ["experiment=paper_table2"], _paper_table2_configs, trains=False),
    "ablation_memory": Study("ablation_memory", [], _ablation_configs, tables_from_runs=_ablation_tables, trains=False),
    "llama3_405b": Study("llama3_405b", ["experiment=llama3_405b"], _frontier_configs, trains=False),
    "decision_map": Study("decision_map", [], _decision_map_configs, trains=False, own_tables=_decision_map_tables),
}


def _folder_name(label: str) -> str:
    return re.sub(r"[^\w.-]+", "_", label)


# ------------------------------------------------------------------------ fingerprints
def run_configs(configs: Dict[str, List[str]], out: Path, extra: Sequence[str] = ()) -> Dict[str, dict]:
    """Run each configuration in this process (label -> summary.json), in out/<label>/."""
    from mecefo_exp import api

    summaries = {}
    for label, overrides in configs.items():
        summaries[label] = api.run(api.compose([*overrides, *extra]), out / _folder_name(label))
        if summaries[label].get("status") != "ok":
            raise RuntimeError(
                f"{label}: the run ended {summaries[label].get('status')}: {summaries[label].get('error')}"
            )
    return summaries


def combined(fingerprints: Dict[str, str]) -> str:
    """One hash over every configuration's clock fingerprint (sorted by label)."""
    return hashlib.sha1(json.dumps(sorted(fingerprints.items())).encode()).hexdigest()[:12]


@dataclass
class Fingerprints:
    data: str  # "none" where the study trains on nothing
    clock: str
    clocks: Dict[str, str]  # label -> the configuration's clock fingerprint

    def line(self, study: str) -> str:
        import torch

        return (
            f"**Fingerprints** (`{study}`): data `{self.data}`, clock `{self.clock}`; "
            f"Python {platform.python_version()}, torch {torch.__version__}."
        )


def fingerprints(study: Study) -> Fingerprints:
    """What the current code gives for the study: its configurations run numerics-free for one step."""
    import logging

    quiet, level = logging.getLogger("mecefo_exp"), logging.getLogger("mecefo_exp").level
    quiet.setLevel(logging.ERROR)  # the probes' start lines and memory warnings say nothing here
    try:
        with tempfile.TemporaryDirectory(prefix=f"fingerprints-{study.name}-") as tmp:
            summaries = run_configs(study.configs(), Path(tmp), extra=PROBE)
    finally:
        quiet.setLevel(level)
    clocks = {label: s["clock"]["fingerprint"] for label, s in summaries.items()}
    data = {s.get("data_fingerprint") for s in summaries.values()} if study.trains else {None}
    if len(data) != 1:
        raise RuntimeError(f"{study.name}: its configurations read different corpora: {sorted(map(str, data))}")
    return Fingerprints(data.pop() or "none", combined(clocks), clocks)


def published_fingerprints(text: str) -> Dict[str, Dict[str, str]]:
    """study -> {data, clock, python, torch} as RESULTS.md states them."""
    return {m["study"]: m.groupdict() for m in FINGERPRINT_LINE.finditer(text)}


# ------------------------------------------------------------------------ tables
@dataclass
class Block:
    study: str
    file: str
    rows: Optional[str]
    start: int  # line index of the table's first line
    end: int  # one past its last line
    text: str


def table_blocks(text: str) -> List[Block]:
    """Every marked table of RESULTS.md, in order."""
    lines, blocks = text.split("\n"), []
    for i, line in enumerate(lines):
        m = TABLE_MARKER.match(line.strip())
        if not m:
            continue
        end = i + 1
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        blocks.append(Block(m["study"], m["file"], m["rows"], i + 1, end, "\n".join(lines[i + 1 : end])))
    return blocks


def marker_problems(text: str, studies: Sequence[str]) -> List[str]:
    """One line per marker that would leave a table unchecked: a comment that opens like a marker
    but is not one, an unknown study, a `rows=` that is not a regular expression, a marker with no
    table under it; and per study of `studies` with no marked table at all."""
    problems, marked = [], set()
    for n, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        words = stripped[4:].split() if stripped.startswith("<!--") else []
        if not (words and ("table" in stripped.lower() or difflib.get_close_matches(words[0].lower(), ["table"]))):
            continue  # not a comment, or one that does not look like a marker
        m = TABLE_MARKER.match(stripped)
        if not m:
            problems.append(
                f"RESULTS.md line {n}: {stripped!r} is not a table marker (<!-- table STUDY FILE [rows=REGEX] -->)"
            )
        elif m["study"] not in STUDIES:
            problems.append(
                f"RESULTS.md line {n}: unknown study {m['study']!r} in a table marker; allowed: {', '.join(STUDIES)}"
            )
        else:
            marked.add(m["study"])
            if m["rows"] is not None:
                try:
                    re.compile(m["rows"])
                except re.error as e:
                    problems.append(f"RESULTS.md line {n}: rows={m['rows']} is not a regular expression ({e})")
    for block in table_blocks(text):
        if block.study in STUDIES and not block.text:
            problems.append(f"RESULTS.md line {block.start}: no table under the marker {block.study} {block.file}")
    problems += [
        f"RESULTS.md: no table of study {name} is marked (<!-- table {name} FILE -->): nothing of it would be checked"
        for name in studies
        if name not in marked
    ]
    return problems


def select_rows(table: str, rows: Optional[str]) -> str:
    """The markdown table without its title; with `rows`, the header and the rows that match."""
    lines = [line for line in table.strip().split("\n") if line.startswith("|")]
    if rows is None:
        return "\n".join(lines)
    pattern = re.compile(rows)
    return "\n".join(lines[:2] + [line for line in lines[2:] if pattern.search(line)])


def render(block: Block, tables: Dict[str, Dict[str, str]]) -> str:
    try:
        return select_rows(tables[block.study][block.file], block.rows)
    except KeyError:
        raise SystemExit(
            f"RESULTS.md marks a table {block.study} {block.file}: the regenerated {block.study} "
            f"has {', '.join(sorted(tables.get(block.study, {}))) or 'no tables'}"
        ) from None


def rewrite(text: str, tables: Dict[str, Dict[str, str]], prints: Dict[str, Fingerprints]) -> str:
    """RESULTS.md with every marked table (of the studies in `tables`) and fingerprint line replaced."""
    lines = text.split("\n")
    for block in reversed(table_blocks(text)):
        if block.study in tables:
            lines[block.start : block.end] = render(block, tables).split("\n")
    out = "\n".join(lines)
    for name, fp in prints.items():
        out = re.sub(FINGERPRINT_LINE.pattern.replace(r"(?P<study>\w+)", re.escape(name)), fp.line(name), out)
    return out


# ------------------------------------------------------------------------ regenerate
def sweep_tables(study: Study, sweep: Path, out: Path) -> Dict[str, str]:
    """The markdown tables of a finished sweep, analysed afresh by the current code into `out`
    ({file name: text}): a sweep's own analysis folder may come from an older analysis."""
    from . import figures, frontier, paper_scale

    if not any(sweep.glob("*/summary.json")):
        raise SystemExit(f"{sweep}: no run folders with a summary.json (did the sweep run?)")
    analyze = {"paper_table2": paper_scale.analyze, "llama3_405b": frontier.analyze}.get(study.name, figures.analyze)
    analyze([sweep], out, figures=False, verbose=False)
    return {p.name: p.read_text() for p in sorted((out / "tables").glob("*.md"))}


def regenerate(study: Study, out: Path, sweep: Optional[Path] = None) -> Tuple[Dict[str, str], Fingerprints]:
    """Rerun the study into out/<name> (or read a finished `sweep` of it); its tables and the
    fingerprints its runs carry."""
    folder = out / study.name
    if study.own_tables is not None:  # its own command's output folder, given or made now
        if sweep is None:
            study.own_tables(folder)
        tables = {p.name: p.read_text() for p in sorted(Path(sweep or folder).glob("tables/*.md"))}
        return tables, fingerprints(study)
    if sweep is not None:
        return sweep_tables(study, sweep, folder / "analysis"), fingerprints_of_sweep(study, sweep)
    if study.tables_from_runs is not None:
        summaries = run_configs(study.configs(), folder)
        tables = study.tables_from_runs(folder)
        clocks = {label: s["clock"]["fingerprint"] for label, s in summaries.items()}
        return tables, Fingerprints("none", combined(clocks), clocks)
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", *study.command, f"hydra.sweep.dir={folder}"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    return sweep_tables(study, folder, folder / "analysis"), fingerprints_of_sweep(study, folder)


def fingerprints_of_sweep(study: Study, folder: Path) -> Fingerprints:
    """The fingerprints the sweep's own runs recorded, for the study's configurations."""
    current = fingerprints(study)  # which label each clock belongs to
    seen = {}
    for path in folder.glob("*/summary.json"):
        s = json.loads(path.read_text())
        seen.setdefault("data", set()).add(s.get("data_fingerprint"))
        seen.setdefault("clock", set()).add(s["clock"]["fingerprint"])
    missing = sorted(set(current.clocks.values()) - seen.get("clock", set()))
    if missing:
        raise SystemExit(
            f"{study.name}: the sweep's runs carry no clock {', '.join(missing)} that the current "
            f"code gives for its configurations"
        )
    data = seen.get("data", {None}) if study.trains else {None}
    return Fingerprints(",".join(sorted(map(str, data))) if data != {None} else "none", current.clock, current.clocks)


#: RESULTS.md's tables that `regenerate` does not rerun, and how to rerun them
NOT_REGENERATED = [
    "Table 3 and the other MeCeFO presets (paper_table3, mecefo_ablation, mecefo_asymmetric, mecefo_frequency: "
    "102 runs with numerics, hours on 2 cores): the commands in their RESULTS.md sections",
    "the Oobleck artifact comparison: `make oobleck-artifact` (prints its own agreement)",
    "the appendix: superseded tables of an older corpus and of a clock that measured this machine "
    "(hardware=measured: not reproducible to the digit by design)",
]


def not_regenerated_note(names: Sequence[str]) -> str:
    """The closing lines: what this command did not regenerate."""
    skipped = [n for n in STUDIES if n not in names]
    lines = ["not regenerated by this command:"]
    lines += [f"  - study {n}: `python -m analysis.published regenerate {n} --out DIR`" for n in skipped]
    lines += [f"  - {item}" for item in NOT_REGENERATED]
    return "\n".join(lines)


def check(text: str, tables: Dict[str, Dict[str, str]], prints: Dict[str, Fingerprints]) -> bool:
    """Print identical or a diff per marked table and fingerprint; True when everything matches."""
    same = True
    for block in table_blocks(text):
        if block.study not in tables:
            continue
        fresh = render(block, tables)
        label = f"{block.study} {block.file}" + (f" rows={block.rows}" if block.rows else "")
        if fresh == block.text:
            print(f"identical: {label}")
        else:
            same = False
            print(f"DIFFERENT: {label}")
            sys.stdout.writelines(
                difflib.unified_diff(
                    block.text.splitlines(True), fresh.splitlines(True), "RESULTS.md", "regenerated", n=0
                )
            )
            print()
    stated = published_fingerprints(text)
    for name, fp in prints.items():
        old = stated.get(name)
        if old is None or (old["data"], old["clock"]) != (fp.data, fp.clock):
            same = False
            print(
                f"DIFFERENT: {name} fingerprints: RESULTS.md "
                f"{(old['data'], old['clock']) if old else 'states none'}, regenerated {(fp.data, fp.clock)}"
            )
        else:
            print(f"identical: {name} fingerprints (data {fp.data}, clock {fp.clock})")
    return same


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.published", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fingerprints", help="the fingerprints the current code gives, beside RESULTS.md's")
    f.add_argument("studies", nargs="*", metavar="STUDY", help=f"default: all ({', '.join(STUDIES)})")
    r = sub.add_parser("regenerate", help="rerun the studies and diff their tables against RESULTS.md")
    r.add_argument("studies", nargs="*", metavar="STUDY", help=f"default: all ({', '.join(STUDIES)})")
    r.add_argument("--out", required=True, help="scratch folder for the regenerated runs")
    r.add_argument("--results", default=str(RESULTS), help="the file to check (default: RESULTS.md)")
    r.add_argument("--write", action="store_true", help="replace RESULTS.md's tables and fingerprint lines")
    r.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="STUDY=DIR",
        help="read a finished sweep of STUDY instead of running it again",
    )
    args = p.parse_args(argv)
    names = list(args.studies) or list(STUDIES)
    unknown = [n for n in names if n not in STUDIES]
    if unknown:
        p.error(f"unknown study {', '.join(unknown)}: allowed: {', '.join(STUDIES)}")
    if args.command == "fingerprints":
        stated = published_fingerprints(RESULTS.read_text())
        for name in names:
            fp = fingerprints(STUDIES[name])
            old = stated.get(name)
            verdict = (
                "matches RESULTS.md"
                if old and (old["data"], old["clock"]) == (fp.data, fp.clock)
                else f"RESULTS.md states {(old['data'], old['clock']) if old else 'none'}"
            )
            print(f"{fp.line(name)}  ({verdict})")
        return 0
    results = Path(args.results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sweeps = dict(item.split("=", 1) for item in args.sweep if "=" in item)
    bad = [
        item
        for item in args.sweep
        if "=" not in item
        or item.split("=", 1)[0] not in STUDIES
        or STUDIES[item.split("=", 1)[0]].tables_from_runs is not None
    ]
    if bad:
        p.error(
            f"--sweep {bad[0]}: allowed: STUDY=DIR for a sweep study "
            f"({', '.join(n for n, s in STUDIES.items() if s.tables_from_runs is None)})"
        )
    problems = marker_problems(results.read_text(), names)  # before any run: a bad marker hides a table
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    tables, prints = {}, {}
    for name in names:
        given = Path(sweeps[name]) if name in sweeps else None
        tables[name], prints[name] = regenerate(STUDIES[name], out, given)
        for file, text in tables[name].items():
            (out / f"{name}__{file}").write_text(text)
    text = results.read_text()
    if args.write:
        results.write_text(rewrite(text, tables, prints))
        print(f"wrote the regenerated tables and fingerprints of {', '.join(names)} into {results}")
        print(not_regenerated_note(names))
        return 0
    same = check(text, tables, prints)
    print(
        "every regenerated table is identical to RESULTS.md"
        if same
        else f"RESULTS.md differs from the regenerated tables (fresh tables under {out})"
    )
    print(not_regenerated_note(names))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
