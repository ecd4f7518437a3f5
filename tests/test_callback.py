"""The sweep's collect callback: a failed analysis names the sweep and the command that redoes it."""

import logging

from omegaconf import OmegaConf


def test_a_failed_analysis_names_the_sweep_and_the_module_to_rerun(tmp_path, caplog, monkeypatch):
    import analysis.paper_scale as paper_scale
    from analysis.callback import CollectCallback

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(paper_scale, "analyze", broken)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    callback = CollectCallback(study="paper_scale")
    caplog.set_level(logging.ERROR, logger="analysis.callback")
    callback.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    (message,) = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert message.startswith(f"CollectCallback: analysis of {sweep} failed")
    assert f"python -m analysis.paper_scale {sweep} --out {sweep / 'analysis'}" in message
