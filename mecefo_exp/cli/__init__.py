"""The command line: `mecefo-exp ...` (installed console script) == `python run.py ...`.

    mecefo-exp                                      # tiny LLaMA, 8 workers, mecefo, failure=high
    mecefo-exp method=bamboo failure=medium model=llama_60m
    mecefo-exp -m method=checkpoint,mecefo failure=none,high
    mecefo-exp experiment=debug                     # a few tiny steps: does everything work?

Hydra finds its configs in the checkout's conf/ or, for an installed wheel, in the copy
the package carries (mecefo_exp.paths.conf_dir), so the command works from any folder.

    command.py     the console script: the checks before Hydra starts, the given folder's lock,
                   torchrun's agreement on one folder, then Hydra's main and a sweep's exit code
    preflight.py   what a command line is refused for before Hydra writes anything, in one line
    job.py         one run or one sweep job as Hydra starts it: its folder, lock, checks and end
    presets.py     the presets a command line names, and a sweep's first job
    sweeps.py      a sweep: failed jobs listed at the end, a stopped sweep's unfinished jobs
    hooks.py       the Hydra callbacks conf/ names (collecting a study's tables after its sweep)

Nothing is imported here until the command runs: the in-process API (mecefo_exp.api) reads the
schemas' registration (config/hydra_glue.py) without loading Hydra's command line.
"""


def entry() -> None:
    """The console script (pyproject [project.scripts]), `python run.py` and `python -m mecefo_exp`."""
    from .command import entry as run_the_command

    run_the_command()
