"""A numerics-free run imports no tensor library: torch, transformers and datasets stay unloaded.

Such a run walks the trace, the methods and the clock without tensor math; with its FLOP counts
and model shape cached (the first run of a shape counts them on the meta device) it needs none of
the three, whose imports cost several CPU seconds. The run below forbids them: any import of one
ends the process with the importing chain printed.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = [
    "model=llama_350m",
    "hardware=a100_32",
    "trainer.numerics=false",
    "trainer.max_steps=5",
    "method=mecefo",
    "failure=high",
    "trainer.progress=none",
]

FORBIDDING = """
import sys, traceback
FORBIDDEN = ("torch", "transformers", "datasets")

class Forbid:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            print("imported " + name + ":\\n" + "".join(traceback.format_stack(limit=12)), file=sys.stderr)
            sys.exit(3)
        return None

sys.meta_path.insert(0, Forbid())
sys.argv = ["run.py"] + sys.argv[1:]
sys.path.insert(0, ".")
from mecefo_exp.cli import entry
entry()
"""


def run(args, cache, folder, forbid):
    env = dict(os.environ, MECEFO_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    command = [sys.executable, "-c", FORBIDDING] if forbid else [sys.executable, "run.py"]
    return subprocess.run(
        command + args + [f"hydra.run.dir={folder}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # three run.py processes (~16 s): `make test-cli`
def test_a_numerics_free_run_imports_no_tensor_library(tmp_path):
    cache = tmp_path / "cache"
    cold = run(RUN, cache, tmp_path / "cold", forbid=True)  # nothing cached: the shape is counted with torch
    assert cold.returncode != 0 and "imported torch" in cold.stderr, cold.stderr[-2000:]
    for method in ("mecefo",):  # its low-rank projections keep a schedule without tensors
        warm = run(RUN + [f"method={method}"], cache, tmp_path / f"warm_{method}", forbid=False)
        assert warm.returncode == 0, warm.stderr[-2000:]
        forbidden = run(RUN + [f"method={method}"], cache, tmp_path / f"run_{method}", forbid=True)
        assert forbidden.returncode == 0, forbidden.stderr[-3000:]
        assert '"status": "ok"' in (tmp_path / f"run_{method}" / "summary.json").read_text()
