"""Entry point: compose the Hydra config, check it, train, leave the run record.

    python run.py                                   # tiny LLaMA, 8 workers, mecefo, failure=high
    python run.py method=bamboo failure=medium model=llama_60m
    python run.py -m method=checkpoint,mecefo failure=none,high

The same command is installed as `mecefo-exp` (mecefo_exp/cli/).
"""

from mecefo_exp.cli import entry

if __name__ == "__main__":
    entry()
