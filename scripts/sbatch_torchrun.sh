#!/bin/bash
# One run of the torchrun tier across the nodes of a SLURM job: srun starts one torchrun agent
# per node, the agents meet in a c10d rendezvous on the first node, and each node runs
# GPUS_PER_NODE ranks (one worker each). Submit from the checkout, which every node must see
# (shared storage), with run.py overrides as arguments:
#
#   sbatch --nodes=2 scripts/sbatch_torchrun.sh method=checkpoint failure=high failure.kill=true
#
# Settings (environment): GPUS_PER_NODE (default: the GPUs SLURM gave each node, else 8),
# RDZV_PORT (29400), RUN_DIR (runs/slurm/<job id>), MECEFO_CACHE (.cache of the checkout),
# PYTHON (.venv/bin/python). The run folder and MECEFO_CACHE (tokenized corpus, FLOP counts)
# must be on storage every node sees (docs/DESIGN.md, "On a cluster").
#
# The first node hosts the rendezvous: if it dies the job cannot go on (the other nodes close the
# run's record as failed, saying so in one line), and when its agent exits
# at the end an agent still polling the rendezvous may fail although the run finished (the run
# folder's summary.json says how the run ended). A rendezvous host apart from the training
# nodes (RDZV_HOST, with a store of your own and --rdzv-conf=is_host=false) avoids both.
#SBATCH --job-name=mecefo-torchrun
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=04:00:00
set -euo pipefail
# srun does not inherit sbatch's --cpus-per-task (Slurm 22.05 and later): hand it on, or every
# task gets one CPU
if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then export SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}; fi

PYTHON=${PYTHON:-.venv/bin/python}
GPUS_PER_NODE=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}
NNODES=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:?run this under SLURM (sbatch), or set SLURM_NNODES}}
RUN_DIR=${RUN_DIR:-runs/slurm/${SLURM_JOB_ID:-job}}
# the caches every node reads (and the first one to need them writes): shared, never per node
export MECEFO_CACHE=${MECEFO_CACHE:-$PWD/.cache}
# compute nodes often have no internet: the corpus, tokenizers and datasets come from the caches
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# torch 2.13: with the rendezvous store shared, a replaced node cannot join a later round
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
# torch's C++ side prints every failed store read with its C++ frames when a node dies (the
# agents and the ranks); the errors say it in a line without them
export TORCH_CPP_LOG_LEVEL=${TORCH_CPP_LOG_LEVEL:-ERROR}

if [[ ${1:-} != --on-node ]]; then  # the batch step: one task per node, each runs the branch below
    exec srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash scripts/sbatch_torchrun.sh --on-node "$@"
fi
shift
HEAD=${RDZV_HOST:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
command=("$PYTHON" -m torch.distributed.run --nnodes="$NNODES" --nproc-per-node="$GPUS_PER_NODE"
         --rdzv-backend=c10d --rdzv-endpoint="$HEAD:${RDZV_PORT:-29400}" --rdzv-id="${SLURM_JOB_ID:-job}"
         --max-restarts=3
         run.py cluster=torchrun cluster.n_workers=$((NNODES * GPUS_PER_NODE)) "hydra.run.dir=$RUN_DIR" "$@")
if [[ -n ${MECEFO_DRY_RUN:-} ]]; then  # print what this node would run, one argument per line
    printf '%s\n' "${command[@]}"
    exit 0
fi
exec "${command[@]}"
