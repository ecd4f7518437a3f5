"""The SLURM recipes (scripts/sbatch_*.sh) are real: they parse, start one task per node, and the
run.py command each node runs composes and passes the harness's validation."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, compose_cfg
from mecefo_exp.config import validate

SCRIPTS = ["scripts/sbatch_torchrun.sh", "scripts/sbatch_torchft.sh"]
SLURM = {
    "SLURM_NNODES": "2",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_ID": "4242",
    "SLURM_NODEID": "1",
    "SLURM_GPUS_ON_NODE": "2",
    "SLURM_JOB_NODELIST": "node[001-002]",
}


def run_script(script, *args, extra_env=None, path_prefix=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MECEFO_CACHE", "RANK", "WORLD_SIZE")}
    env.update(SLURM, **(extra_env or {}))
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return subprocess.run(["bash", script, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_recipe_parses_and_starts_one_task_per_node(script, tmp_path):
    assert subprocess.run(["bash", "-n", script], cwd=ROOT).returncode == 0
    # a stand-in srun that shows how it was called (the batch step runs on no cluster here)
    srun = tmp_path / "srun"
    srun.write_text(
        '#!/bin/bash\nprintf "%s\\n" "$@"\nprintf "MECEFO_CACHE=%s\\n" "$MECEFO_CACHE"\n'
        'printf "HF=%s,%s\\n" "$HF_HUB_OFFLINE" "$HF_DATASETS_OFFLINE"\n'
    )
    srun.chmod(0o755)
    out = run_script(script, "method=mecefo", path_prefix=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ["--ntasks-per-node=1", "--kill-on-bad-exit=0", "bash"]
    assert lines[3:6] == [script, "--on-node", "method=mecefo"]
    assert f"MECEFO_CACHE={ROOT}/.cache" in lines and "HF=1,1" in lines  # shared cache, offline


def node_command(script, **env):
    out = run_script(
        script,
        "--on-node",
        "method=mecefo",
        "failure=high",
        extra_env={"MECEFO_DRY_RUN": "1", "RDZV_HOST": "node001", "COORDINATOR_HOST": "node001", **env},
    )
    assert out.returncode == 0, out.stderr
    command = out.stdout.splitlines()
    return command[command.index("run.py") + 1 :]


def test_the_torchrun_node_command_composes_and_validates(monkeypatch):
    args = node_command("scripts/sbatch_torchrun.sh")
    assert "cluster=torchrun" in args and "cluster.n_workers=4" in args and "hydra.run.dir=runs/slurm/4242" in args
    cfg = compose_cfg([a for a in args if not a.startswith("hydra.")])
    monkeypatch.setenv("RANK", "0")  # what torchrun gives each rank
    monkeypatch.setenv("WORLD_SIZE", "4")
    validate(cfg)
    assert cfg.cluster.n_workers == 4 and cfg.method.name == "mecefo"


def test_the_torchft_node_command_composes_and_validates():
    args = node_command("scripts/sbatch_torchft.sh", MECEFO_BIND="10.0.0.6")
    assert {
        "cluster=torchft",
        "cluster.machines=2",
        "cluster.machine_rank=1",
        "cluster.n_workers=4",
        "cluster.coordinator=node001:29510",
        "cluster.bind=10.0.0.6",
    } <= set(args)
    # the command line itself, as run.py reads it: composed, validated, printed, nothing run
    out = subprocess.run(
        [sys.executable, "run.py", *args, "--cfg", "job"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "machine_rank: 1" in out.stdout and "bind: 10.0.0.6" in out.stdout
    validate(compose_cfg([a for a in args if not a.startswith("hydra.")]))


def test_the_torchft_recipe_refuses_a_node_address_nobody_else_can_reach():
    out = run_script(
        "scripts/sbatch_torchft.sh",
        "--on-node",
        extra_env={"MECEFO_DRY_RUN": "1", "COORDINATOR_HOST": "node001", "MECEFO_BIND": "127.0.1.1"},
    )
    assert out.returncode == 2 and "set MECEFO_BIND" in out.stderr and out.stderr.count("\n") == 1
