"""One run: its parts built from the config, the loop that trains it, and the record it leaves.

`experiment.Experiment` is the entry; `context.Context` is what methods see of the run. Nothing
here is imported at package import: the run's modules load torch only when a run has numerics.
"""
