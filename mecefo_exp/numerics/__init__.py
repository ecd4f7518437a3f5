"""The numerics of a step: the LLaMA model, the optimizer recipe, the executor of a step's plan,
and MeCeFO's approximations and low-rank projections.

A run with numerics trains with them; the clock counts FLOPs by running the same code on a
shape-only model (timing/flops.py), so that what is timed is what is trained.
"""
