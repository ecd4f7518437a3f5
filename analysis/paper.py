"""The MeCeFO paper's published numbers (NeurIPS 2025, arXiv 2510.16415), as docs/METHODS.md
collects them with the table each comes from.

Only values the paper prints are stored as (paper); anything computed from them is marked
(derived) where it is used. Throughput drops are the paper's printed percentages, not
recomputed from the rounded tokens/s (1 - 407/438 = 7.08%, the paper prints 7.04%).

Which paper row a harness run is compared with
----------------------------------------------
The paper trains llama_350m, llama_1b and llama_7b, which are also model presets here
(conf/model/). A run of one of those models is compared with that row. A run of any other
model (llama_tiny, llama_20m, ...) is compared with the paper's **1B** row, but only on
*relative* quantities (throughput drop, resilience ratio, perplexity change), and the
column `paper_ref` then says "1B (reference; model differs)". Absolute paper values
(tokens/s, perplexity) are left blank for such models: a 1B model's tokens/s or
perplexity next to a 2M-parameter model's would mean nothing, whereas a drop or a
relative change is dimensionless. 1B is the paper's main setting (its gradient-error
figures and most of its discussion are about LLaMA-1B).
"""

from __future__ import annotations

from typing import Dict, Optional

#: the method the paper proposes: the subject of its Table 3 and the reference of its resilience
#: ratios. The studies that set a run against the paper name it through here, never by hand.
METHOD = "mecefo"

#: harness model preset -> the paper's row label
PAPER_MODELS = {"llama_350m": "350M", "llama_1b": "1B", "llama_7b": "7B"}
#: the paper row used (for relative numbers only) when the model is not one of the paper's
REFERENCE_ROW = "1B"

# --------------------------------------------------------------------- Table 2 (paper)
#: Throughput in tokens/s, failure-free -> failure=high, and the printed drop in percent.
TABLE2_THROUGHPUT: Dict[str, Dict[str, Dict[str, float]]] = {
    "350M": {
        "bamboo": {"none": 438e3, "high": 407e3, "drop_pct": 7.04},
        "oobleck": {"none": 704e3, "high": 632e3, "drop_pct": 10.14},
        "mecefo": {"none": 1199e3, "high": 1186e3, "drop_pct": 1.07},
    },
    "1B": {
        "bamboo": {"none": 154e3, "high": 141e3, "drop_pct": 8.21},
        "oobleck": {"none": 291e3, "high": 251e3, "drop_pct": 13.87},
        "mecefo": {"none": 471e3, "high": 457e3, "drop_pct": 2.98},
    },
    "7B": {
        "bamboo": {"none": 12.4e3, "high": 9.8e3, "drop_pct": 20.84},
        "oobleck": {"none": 67.0e3, "high": 48.1e3, "drop_pct": 28.09},
        "mecefo": {"none": 111.1e3, "high": 106.5e3, "drop_pct": 4.18},
    },
}

# --------------------------------------------------------------------- Table 3 (paper)
#: MeCeFO's final validation perplexity per failure level. The paper prints the change
#: only for `high` (+1.60 / +2.19 / +1.61 %); the others are (derived) from these values.
TABLE3_PPL: Dict[str, Dict[str, float]] = {
    "350M": {"none": 18.74, "low": 18.75, "medium": 18.88, "high": 19.04},
    "1B": {"none": 15.49, "low": 15.51, "medium": 15.61, "high": 15.83},
    "7B": {"none": 14.92, "low": 14.97, "medium": 15.04, "high": 15.16},
}
TABLE3_HIGH_CHANGE_PCT = {"350M": 1.60, "1B": 2.19, "7B": 1.61}

#: The paper's bound on MeCeFO's relative gradient error during LLaMA-1B pretraining (Figs. 4-7).
GRAD_ERROR_BOUND = 0.6

#: The paper's ablation of MeCeFO's three techniques, as docs/METHODS.md records it ("Other experiments"):
#: "without them the neighbor runs out of memory; with all three, close to failure-free". Only the
#: first half is a memory statement; docs/METHODS.md copies no memory figure (GB or percent) from the paper.
ABLATION_MEMORY = {"naive_fits": False}

#: Paper Table 1, the failure presets: a failure every `every_h` hours in a 32-GPU cluster,
#: recovery after `recover_h` hours.
TABLE1_FAILURES = {
    "low": {"every_h": 2, "recover_h": 4},
    "medium": {"every_h": 1, "recover_h": 3},
    "high": {"every_h": 0.5, "recover_h": 2},
}


def paper_row(model: Optional[str]) -> tuple[str, bool]:
    """(paper row label, exact) for a harness model: exact is False for the 1B reference."""
    if model in PAPER_MODELS:
        return PAPER_MODELS[model], True
    return REFERENCE_ROW, False


def ref_label(model: Optional[str]) -> str:
    row, exact = paper_row(model)
    return row if exact else f"{row} (reference; model differs)"


def throughput(model: Optional[str], method: str) -> Dict[str, Optional[float]]:
    """Paper Table 2 for (model, method): none, high (tokens/s; blank unless the model matches),
    drop at high as a fraction, and the resilience ratio drop / MeCeFO's drop (derived)."""
    row, exact = paper_row(model)
    table = TABLE2_THROUGHPUT[row]
    out: Dict[str, Optional[float]] = {"none": None, "high": None, "drop_high": None, "resilience_high": None}
    if method not in table:
        return out
    entry = table[method]
    if exact:
        out["none"], out["high"] = entry["none"], entry["high"]
    out["drop_high"] = entry["drop_pct"] / 100
    out["resilience_high"] = entry["drop_pct"] / table[METHOD]["drop_pct"]
    return out


def perplexity(model: Optional[str], method: str, failure: str) -> Dict[str, Optional[float]]:
    """Paper Table 3 for MeCeFO: ppl (blank unless the model matches) and the change
    against failure-free as a fraction (printed for high, derived for low/medium)."""
    out: Dict[str, Optional[float]] = {"ppl": None, "change": None}
    if method != METHOD:
        return out
    row, exact = paper_row(model)
    values = TABLE3_PPL[row]
    if failure not in values:
        return out
    if exact:
        out["ppl"] = values[failure]
    if failure == "high":
        out["change"] = TABLE3_HIGH_CHANGE_PCT[row] / 100
    else:
        out["change"] = values[failure] / values["none"] - 1
    return out
