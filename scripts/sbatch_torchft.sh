#!/bin/bash
# One run of the torchft tier across the nodes of a SLURM job: srun starts one launcher per
# node (`run.py cluster=torchft cluster.machine_rank=<node>`); the first node's launcher serves
# the coordination store and torchft's lighthouse, and every node runs WORKERS_PER_NODE worker
# processes (one torchft replica group each). Submit from the checkout, which every node must
# see (shared storage), with run.py overrides as arguments:
#
#   sbatch --nodes=2 scripts/sbatch_torchft.sh method=mecefo failure=high failure.kill=true
#
# Settings (environment): WORKERS_PER_NODE (default: the GPUs SLURM gave each node, else 8),
# COORDINATOR_PORT (29510), RUN_DIR (runs/slurm/<job id>), MECEFO_CACHE (.cache of the
# checkout), PYTHON (.venv/bin/python), MECEFO_BIND (the address this node's servers listen on;
# default: the address its hostname resolves to, which is how the other nodes reach it).
#
# The run's servers listen on that address, not on every interface; they include the gloo
# connections a heal sends the model's state over (docs/DESIGN.md, "What listens on the
# network"): use the cluster's private network. A node that dies (its launcher and workers)
# is survived in place: the other nodes' workers go on, and a launcher started again on that
# node with the same command (e.g. `srun --nodes=1 --nodelist=<node> ...` from this job, or
# SLURM's requeue of the step) heals its workers from live peers. The first node hosts the
# store and the lighthouse: the run cannot survive its loss (cluster.lighthouse may name a
# lighthouse elsewhere).
#SBATCH --job-name=mecefo-torchft
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
WORKERS_PER_NODE=${WORKERS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}
NNODES=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:?run this under SLURM (sbatch), or set SLURM_NNODES}}
RUN_DIR=${RUN_DIR:-runs/slurm/${SLURM_JOB_ID:-job}}
# the caches every node reads (and the first one to need them writes): shared, never per node
export MECEFO_CACHE=${MECEFO_CACHE:-$PWD/.cache}
# compute nodes often have no internet: the corpus, tokenizers and datasets come from the caches
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

if [[ ${1:-} != --on-node ]]; then  # the batch step: one task per node, each runs the branch below
    exec srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash scripts/sbatch_torchft.sh --on-node "$@"
fi
shift
HEAD=${COORDINATOR_HOST:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
BIND=${MECEFO_BIND:-$(getent ahostsv4 "$(hostname)" | awk 'NR == 1 {print $1}')}
case $BIND in
    "" | 127.*) echo "error: this node's address '${BIND}' (MECEFO_BIND, else what $(hostname) resolves to) is" \
                     "not reachable from the other nodes; set MECEFO_BIND to its address on the cluster network" >&2
                exit 2 ;;
esac
command=("$PYTHON" run.py cluster=torchft cluster.n_workers=$((NNODES * WORKERS_PER_NODE))
         cluster.machines="$NNODES" cluster.machine_rank="$SLURM_NODEID"
         cluster.coordinator="$HEAD:${COORDINATOR_PORT:-29510}" cluster.bind="$BIND"
         "hydra.run.dir=$RUN_DIR" "$@")
if [[ -n ${MECEFO_DRY_RUN:-} ]]; then  # print what this node would run, one argument per line
    printf '%s\n' "${command[@]}"
    exit 0
fi
exec "${command[@]}"
