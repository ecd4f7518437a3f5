"""python -m mecefo_exp ... == mecefo-exp ... == python run.py ..."""

from .cli import entry

entry()
