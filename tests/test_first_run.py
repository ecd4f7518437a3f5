"""What a newcomer's first runs look like: `python run.py experiment=debug` opens without a
warning to change a setting, and a run without overrides gets a folder name that ends cleanly."""

import logging
import re

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from conftest import ROOT, compose_cfg
from mecefo_exp.config.hydra_glue import run_name
from mecefo_exp.methods.mecefo import warn_if_rank_saturates

SHORT = ["trainer.max_steps=2", "trainer.eval_every=0", "trainer.progress=none"]


def _rank_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "method.rank" in r.getMessage()]


def test_the_debug_run_opens_without_a_rank_warning(run_exp, caplog):
    cfg = compose_cfg(["experiment=debug"])
    assert cfg.method.name == "mecefo" and cfg.method.rank < min(cfg.model.hidden_size, cfg.model.intermediate_size)
    with caplog.at_level(logging.WARNING):
        assert warn_if_rank_saturates(cfg.method, cfg.model) is None
        summary, _ = run_exp("experiment=debug", *SHORT, micro=False)
    assert summary["status"] == "ok"
    assert _rank_warnings(caplog) == []
    # the same run at the method's default rank does warn: the check above can see the warning
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        run_exp("experiment=debug", "method.rank=64", *SHORT, micro=False)
    assert _rank_warnings(caplog), "no rank warning at method.rank=64: the test above proves nothing"


def test_the_debug_preset_still_takes_any_method():
    """Its MeCeFO-only setting (conf/experiment_method/debug/) stays out of the other methods."""
    for method in ("checkpoint", "bamboo", "reft"):
        cfg = compose_cfg(["experiment=debug", f"method={method}"])
        assert cfg.method.name == method and "rank" not in cfg.method
    assert compose_cfg(["experiment=debug", "method.rank=4"]).method.rank == 4  # the command line wins
    assert compose_cfg([]).method.rank == 64  # other experiments keep the method's default


def _run_dir(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True).hydra.run.dir


def test_a_run_without_overrides_gets_a_folder_name_without_a_trailing_underscore():
    stamp = r"\d{2}-\d{2}-\d{2}\.\d{6}"
    assert re.fullmatch(rf"runs/\d{{4}}-\d{{2}}-\d{{2}}/{stamp}", _run_dir([]))
    assert re.fullmatch(rf"runs/\d{{4}}-\d{{2}}-\d{{2}}/{stamp}", _run_dir(["seed=3"]))  # seed is not in the name
    # with overrides, the name is as it always was: <time>_<overrides>
    assert re.fullmatch(
        rf"runs/\d{{4}}-\d{{2}}-\d{{2}}/{stamp}_failure=none,method=bamboo", _run_dir(["method=bamboo", "failure=none"])
    )
    assert re.fullmatch(rf"runs/debug/\d{{4}}-\d{{2}}-\d{{2}}/{stamp}_experiment=debug", _run_dir(["experiment=debug"]))


def test_run_name_puts_the_separator_only_before_a_name():
    assert run_name("", "_") == "" and run_name("") == ""
    assert run_name("method=bamboo", "_") == "_method=bamboo" and run_name("method=bamboo") == "method=bamboo"
    assert run_name("model=a/b", "_") == "_model=a_b"
    long = ",".join(f"trainer.key{i}={i}" for i in range(20))
    short = run_name(long)
    assert len(short) == 120 and re.search(r"_[0-9a-f]{8}$", short)
    assert run_name(long, "_") == "_" + short
