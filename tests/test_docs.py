"""README and `run.py --help` agree with the code: the option lists with conf/, the methods with
the registry, the keys with the schema, the times with BENCHMARKS.md; and a newcomer finds the
contents, Troubleshooting, the licence and the citation."""

import re
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import ROOT, compose_cfg
from mecefo_exp.registry import REGISTRY

README = (ROOT / "README.md").read_text()
#: how README and --help name each registry method in prose
DISPLAY = {
    "checkpoint": "checkpoint-restart",
    "jit": "JIT checkpointing",
    "reft": "REFT",
    "baft": "BAFT",
    "bamboo": "Bamboo",
    "oobleck": "Oobleck",
    "mecefo": "MeCeFO",
}


def section(title: str) -> str:
    start = README.index(f"\n{title}")
    level = "\n" + title.split(" ")[0] + " "
    ends = [e for e in (README.find("\n## ", start + 1), README.find(level, start + 1)) if e > 0]
    return README[start : min(ends) if ends else len(README)]


def table_rows(text: str):
    """The cells of each body row of the markdown tables in text."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [
        [c.strip() for c in row.strip("|").split("|")]
        for row in rows
        if not set(row) <= set("|-: ") and not re.match(r"\|\s*(group|key|method|what)\s*\|", row)
    ]


def options(group: str):
    folder = ROOT / "conf" / group
    return {str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml")}


def test_the_config_group_table_lists_every_option_of_conf():
    rows = {r[0].strip("`"): r[1] for r in table_rows(section("### Config groups"))}
    groups = ["model", "data", "method", "failure", "cluster", "hardware", "logger", "scenario", "experiment"]
    assert sorted(rows) == sorted(groups)
    for group in groups:
        listed = set(re.findall(r"[\w/]+", re.sub(r"\(.*?\)", "", rows[group])))
        assert listed == options(group), (
            f"README's {group}: {sorted(listed ^ options(group))} differ from conf/{group}/"
        )


def test_every_registered_method_is_in_the_methods_table_the_intro_and_the_help():
    methods = section("## The methods")
    assert {r[0].strip("`") for r in table_rows(methods)} == set(REGISTRY)
    intro = README[: README.index("## First steps")]
    assert all(DISPLAY[m] in intro for m in REGISTRY), [m for m in REGISTRY if DISPLAY[m] not in intro]
    assert set(DISPLAY) == set(REGISTRY)
    sweep = re.search(r"run\.py -m method=([\w,]+) failure=none,low,medium,high", README)[1]
    assert set(sweep.split(",")) == set(REGISTRY)
    header = yaml.safe_load((ROOT / "conf" / "hydra" / "help" / "mecefo.yaml").read_text())["header"]
    assert all(DISPLAY[m] in " ".join(header.split()) for m in REGISTRY)


@pytest.mark.slow
def test_run_py_help_lists_every_option_and_method():
    out = subprocess.run([sys.executable, "run.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for group in ("method", "failure", "experiment", "model", "hardware"):
        line = re.search(rf"^{group}: (.+)$", out.stdout, re.M)[1]
        assert set(line.split(", ")) == options(group)
    assert all(DISPLAY[m] in text for m in REGISTRY)


def test_the_useful_keys_exist_with_the_defaults_the_table_gives():
    cfg = compose_cfg()
    rows = table_rows(section("### Useful keys"))
    assert len(rows) >= 20
    for key, _, default in rows:
        key = key.strip("`")
        value = OmegaConf.select(cfg, key, default="missing")
        if key.startswith("method.") and value == "missing":  # MeCeFO's keys: under method=mecefo
            value = OmegaConf.select(compose_cfg(["method=mecefo"]), key, default="missing")
        assert value != "missing", f"README's Useful keys: {key} is not a setting"
        first = default.split(" ")[0].rstrip(",")
        if re.fullmatch(r"-?\d+(\.\d+)?|true|false", first):
            assert str(value).lower() == first or float(value) == float(first), (key, value, default)
        elif "," in default and "(" not in default:  # a list of the allowed values
            assert str(value) in [v.strip() for v in default.split(",")], (key, value, default)


def test_the_times_readme_quotes_come_from_benchmarks():
    """Every duration in README's First steps and Running experiments is one BENCHMARKS.md states."""
    bench = (ROOT / "BENCHMARKS.md").read_text()
    text = section("## First steps") + section("## Running experiments")
    durations = re.findall(r"\b(\d[\d,.]*(?: and \d[\d,.]*)? (?:s|min|minutes|h|hours))\b", text)
    assert durations, "no times found: the pattern is stale"
    missing = [d for d in durations if d.split(" and ")[-1] not in bench]
    assert not missing, f"README quotes times BENCHMARKS.md does not have: {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_contents_links_reach_headings_and_a_newcomer_finds_the_essentials():
    anchors = {_slug(h) for h in re.findall(r"^#{2,3} (.+)$", README, re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", README)
    assert len(links) >= 12
    assert [a for a in links if a not in anchors] == []
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:2] == ["First steps", headings[1]] and headings[1].startswith("Results")
    assert "Troubleshooting" in headings and "Licence and citation" in headings
    assert README.index("### Add a method") > README.index("## The methods")
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and "2510.16415" in citation["preferred-citation"]["url"]
    assert "![Which method wins where" in section("## Results")


def test_troubleshooting_covers_what_newcomers_hit():
    text = section("## Troubleshooting")
    for needle in ("Another Python", "trainer.threads=1", "make run ARGS=", "fingerprint", "is in use by"):
        assert needle in text, needle
