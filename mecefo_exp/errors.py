"""The error every layer may raise for a setting that cannot be run: a leaf, so that raising it
imports nothing else of the harness."""


class ConfigError(ValueError):
    """A configuration value that cannot be run. The message is one line for the user."""
