"""What a method's setting is for, declared on the setting itself: the studies that set a method's
saves by wall-clock time (analysis/simulate.py, analysis/decision_map.py) find the setting by its role,
so a method names no study and a study names no method.

- `FALLBACK`: a periodic disk checkpoint that only backs the method up against the faults its own
  mechanism cannot absorb (whole-job faults); a study of such faults sets it to Daly's interval.
  The methods whose periodic checkpoint is their mechanism (checkpoint-restart, BAFT) have none.
- `FREQUENT_SAVE`: the method's own frequent save, in steps (REFT's snapshot, BAFT's bubble
  checkpoint), which a study may set to a period of wall-clock time.

The periodic checkpoint itself is always `checkpoint_interval` (steps, or "auto" for Daly's optimum);
a method without one (JIT checkpointing) has no such setting.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Dict, Optional

FALLBACK = "fallback"
FREQUENT_SAVE = "frequent_save"
#: the one name of the periodic checkpoint's interval
CHECKPOINT_INTERVAL = "checkpoint_interval"


def role(name: str, **rule: Any) -> Dict[str, Any]:
    """A field's metadata: its role, beside its rule (`role(FALLBACK, **at_least(0, "steps"))`)."""
    assert name in (FALLBACK, FREQUENT_SAVE), name
    return {**rule, "role": name}


def setting_with_role(method_cls, name: str) -> Optional[str]:
    """The method's setting that plays `name`, or None when it has none."""
    return next((f.name for f in fields(method_cls.Config) if f.metadata.get("role") == name), None)


def has_checkpoint_interval(method_cls) -> bool:
    return any(f.name == CHECKPOINT_INTERVAL for f in fields(method_cls.Config))
