"""Typed configuration schemas.

Hydra composes YAML from conf/ onto these dataclasses, so a misspelt key or a value of
the wrong type fails while composing. Values that are well typed but impossible
(n_workers < 1, a sequence longer than the model allows) are caught by `validate`, which
the entry point calls before any compute and which raises `ConfigError` with one line
naming the key, the bad value and what is allowed.

Each method has its own schema (a subclass of `MethodConfig`, beside the method in
mecefo_exp/methods/, found through mecefo_exp/registry.py) so that `method.rank` is a
key of `method=mecefo` and a typo in it is an error, not a silently ignored extra.
"""

# schema.py: the dataclasses; rules.py: their fields' rules; checks.py: validate; implied.py: what a
# config implies; plain.py: a config as plain values
from ..errors import ConfigError
from .checks import model_presets, validate
from .implied import data_parallel_size, is_hybrid, sequences_per_step, stage_layers
from .plain import AttrDict, plain
from .rules import above, at_least, check_fields, choices, within
from .schema import (
    MAX_WORKERS,
    ClusterConfig,
    Config,
    DataConfig,
    FailureConfig,
    HardwareConfig,
    LoggerConfig,
    MethodConfig,
    ModelConfig,
    ParallelConfig,
    TrainerConfig,
    typed_config,
)

__all__ = [
    "AttrDict",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "FailureConfig",
    "HardwareConfig",
    "LoggerConfig",
    "MAX_WORKERS",
    "MethodConfig",
    "ModelConfig",
    "ParallelConfig",
    "TrainerConfig",
    "above",
    "at_least",
    "check_fields",
    "choices",
    "data_parallel_size",
    "is_hybrid",
    "model_presets",
    "plain",
    "sequences_per_step",
    "stage_layers",
    "validate",
    "typed_config",
    "within",
]
