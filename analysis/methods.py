"""How the tables and figures show each method: its label, colour, marker and place in the order.

Every method of the registry (mecefo_exp/registry.py) has a style: its label is its class's
`label`, its colour and marker are taken here (the six first methods keep theirs; a method added
later gets the next unused pair), and the order is the restart family first, then the in-place
methods, MeCeFO last, each in registry order. tests/test_analysis.py pins this to the registry.
"""

from typing import Dict, NamedTuple

from mecefo_exp.methods.rollback import RollbackMethod
from mecefo_exp.registry import REGISTRY, method_class


class MethodStyle(NamedTuple):
    label: str
    colour: str
    marker: str


#: colour and marker of the first methods (their figures stay as they were)
KNOWN = {
    "checkpoint": ("tab:gray", "s"),
    "reft": ("tab:blue", "^"),
    "baft": ("tab:purple", "v"),
    "bamboo": ("tab:orange", "D"),
    "oobleck": ("tab:green", "P"),
    "mecefo": ("tab:red", "o"),
}
#: for methods added later, in registry order
SPARE = [("tab:brown", "X"), ("tab:pink", "*"), ("tab:olive", "h"), ("tab:cyan", "p"), ("black", "d")]


def _order() -> tuple:
    classes = {name: method_class(name) for name in REGISTRY}
    restart = [m for m, cls in classes.items() if issubclass(cls, RollbackMethod)]
    in_place = [m for m in classes if m not in restart and m != "mecefo"]
    return tuple(restart + in_place + (["mecefo"] if "mecefo" in classes else []))


def _styles() -> Dict[str, MethodStyle]:
    spare = iter(SPARE)
    out = {}
    for name in _order():
        colour, marker = KNOWN.get(name) or next(spare)
        out[name] = MethodStyle(method_class(name).label, colour, marker)
    return out


STYLES: Dict[str, MethodStyle] = _styles()
METHOD_ORDER = tuple(STYLES)
METHOD_LABELS = {m: s.label for m, s in STYLES.items()}
METHOD_COLORS = {m: s.colour for m, s in STYLES.items()}
METHOD_MARKERS = {m: s.marker for m, s in STYLES.items()}
