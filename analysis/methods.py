"""How the tables and figures show each method: its label, colour, marker and place in the order.

One row per method of mecefo_exp.methods.REGISTRY (tests/test_analysis.py pins the two to each
other): a method added to the harness without a row here fails that test instead of being shown
unlabelled or left out of a table's order.
"""

from typing import Dict, NamedTuple


class MethodStyle(NamedTuple):
    label: str
    colour: str
    marker: str


#: in table order: the rollback family first, then the in-place methods, MeCeFO last
STYLES: Dict[str, MethodStyle] = {
    "checkpoint": MethodStyle("checkpoint-restart", "tab:gray", "s"),
    "reft": MethodStyle("REFT", "tab:blue", "^"),
    "baft": MethodStyle("BAFT", "tab:purple", "v"),
    "bamboo": MethodStyle("Bamboo", "tab:orange", "D"),
    "oobleck": MethodStyle("Oobleck", "tab:green", "P"),
    "mecefo": MethodStyle("MeCeFO", "tab:red", "o"),
}

METHOD_ORDER = tuple(STYLES)
METHOD_LABELS = {m: s.label for m, s in STYLES.items()}
METHOD_COLORS = {m: s.colour for m, s in STYLES.items()}
METHOD_MARKERS = {m: s.marker for m, s in STYLES.items()}
