"""How the tables and figures show each method: its label, colour, marker and place in the order.

Every method of the registry (mecefo_exp/registry.py) has a style: its label is its class's
`label`, its colour and marker the palette's pair at its place in the registry (the first six
methods' figures keep the colours they always had; a method added at the end takes the next pair),
and the order is the restart family first, then the in-place methods, the paper's method
(analysis/paper.py) last, each in registry order. tests/test_analysis.py pins this to the registry.
"""

from typing import Dict, NamedTuple

from mecefo_exp.methods.rollback import RollbackMethod
from mecefo_exp.registry import REGISTRY, method_class

from . import paper


class MethodStyle(NamedTuple):
    label: str
    colour: str
    marker: str


#: (colour, marker) by place in the registry
PALETTE = [
    ("tab:gray", "s"),
    ("tab:blue", "^"),
    ("tab:purple", "v"),
    ("tab:red", "o"),
    ("tab:orange", "D"),
    ("tab:green", "P"),
    ("tab:brown", "X"),
    ("tab:pink", "*"),
    ("tab:olive", "h"),
    ("tab:cyan", "p"),
    ("black", "d"),
]


def _order() -> tuple:
    classes = {name: method_class(name) for name in REGISTRY}
    restart = [m for m, cls in classes.items() if issubclass(cls, RollbackMethod)]
    in_place = [m for m in classes if m not in restart and m != paper.METHOD]
    return tuple(restart + in_place + ([paper.METHOD] if paper.METHOD in classes else []))


def _styles() -> Dict[str, MethodStyle]:
    place = {name: i for i, name in enumerate(REGISTRY)}
    return {name: MethodStyle(method_class(name).label, *PALETTE[place[name] % len(PALETTE)]) for name in _order()}


STYLES: Dict[str, MethodStyle] = _styles()
METHOD_ORDER = tuple(STYLES)
METHOD_LABELS = {m: s.label for m, s in STYLES.items()}
METHOD_COLORS = {m: s.colour for m, s in STYLES.items()}
METHOD_MARKERS = {m: s.marker for m, s in STYLES.items()}
