"""The error every layer may raise for a setting that cannot be run: a leaf, so that raising it
imports nothing else of the harness."""


class ConfigError(ValueError):
    """A configuration value that cannot be run. The message is one line for the user."""


class AnticipatedEnd(RuntimeError):
    """An end of a run that its record explains (a part the run cannot do without is gone): one
    line for the user, the traceback in the run's log file."""
