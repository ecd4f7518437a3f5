# Two commands for a newcomer:  `make run` (set up + default experiment), `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# TORCH_SPEC selects the torch build: by default the CPU wheel from PyTorch's own index (PyPI's
# Linux wheel is the CUDA build); on a GPU cluster e.g.
#   make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
# A TORCH_SPEC other than the installed one reinstalls torch (recorded in $(VENV)/.torch-spec).
TORCH_SPEC ?= torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: setup run test lint test-slow test-crash test-cli test-fingerprints test-torchft bench bench-gpu figures paper-mini paper-table2 paper-table3 oobleck-artifact decision-map results notebook clean FORCE

setup: $(VENV)/.installed .cache/corpus/lee_background.cor .cache/data/default-corpus.txt

# torch alone (its dependencies come from the package index in the next step), again whenever
# TORCH_SPEC changes (a .venv set up before this file existed keeps its torch: the spec is recorded)
$(VENV)/.torch-spec: FORCE
	@if [ ! -f $@ ] && [ -f $(VENV)/.installed ]; then echo "$(TORCH_SPEC)" > $@; fi
	@if [ "$$(cat $@ 2>/dev/null)" != "$(TORCH_SPEC)" ]; then \
	  set -e; [ -x $(PY) ] || $(PYTHON) -m venv $(VENV); \
	  $(PY) -m pip install -q --upgrade pip; \
	  echo "installing $(TORCH_SPEC)"; \
	  $(PY) -m pip install -q --no-deps --force-reinstall $(TORCH_SPEC); \
	  echo "$(TORCH_SPEC)" > $@; fi

$(VENV)/.installed: $(VENV)/.torch-spec requirements.txt requirements-optional.txt requirements-test.txt constraints.txt pyproject.toml
	$(PY) -m pip install -q -c constraints.txt torch -r requirements.txt -r requirements-optional.txt -r requirements-test.txt
	$(PY) -m pip install -q --no-deps -e .
	@$(PY) -c "import platform, sys; v = platform.python_version(); sys.exit(0) if v == '3.11.7' else \
	  print(f'note: this is Python {v}; CI runs 3.11.7 (and 3.11.2 gives the same numbers): other versions get other package builds')"
	touch $@

.cache/corpus/lee_background.cor: | $(VENV)/.installed
	$(PY) scripts/fetch_corpus.py

# the default corpus and its tokenizer, built once (~1-2 min on 2 cores)
.cache/data/default-corpus.txt: .cache/corpus/lee_background.cor
	$(PY) scripts/fetch_corpus.py --tokenize

# make run ARGS="method=bamboo failure=medium": the overrides go to run.py
run: setup
	$(PY) run.py $(ARGS)

# the fast tier on TEST_WORKERS processes (pytest-xdist; 2 fit this project's 2-core CI machine)
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

# ruff's formatter (check only) and linter over the checkout's Python, then mypy on the package
# (pyproject.toml's [tool.ruff] and [tool.mypy]; mypy ~1 min the first time, seconds with its
# .mypy_cache); installs requirements-lint.txt. .pre-commit-config.yaml runs the same at each commit.
LINT_PATHS := mecefo_exp analysis hydra_plugins run.py bench scripts tests
lint: $(VENV)/.installed
	$(PY) -m pip install -q -c constraints.txt -r requirements-lint.txt
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/mypy

test-slow: setup
	$(PY) -m pip install -q -c constraints.txt -r requirements-notebook.txt
	$(PY) -m pytest -q -m slow

# the crash and torchrun tests: kill -9 and resume (a run folder of an older layout too), torchrun on one and on
# two "machines", on TEST_WORKERS processes (~5.5 min here)
test-crash: setup
	$(PY) -m pytest -q -m slow tests/test_resume.py tests/test_torchrun.py tests/test_structure.py -n $(TEST_WORKERS)

# the tests that start run.py (or the installed entry point) several times as a user does: resumes,
# sweeps, the console script, the wheel, a numerics-free run, SIGTERM, a 2 GB trace, a missing tokenizer; the
# figures and the notebook over a study (~3 min here)
test-cli: setup
	$(PY) -m pytest -q -m slow tests/test_reliability.py tests/test_launchers.py tests/test_package.py \
		tests/test_startup.py tests/test_statistics.py tests/test_c4.py tests/test_analysis.py \
		tests/test_analysis_output.py tests/test_bounded_inputs.py tests/test_runs_guard.py -n $(TEST_WORKERS)

# the published studies' fingerprints that count the FLOPs of many shapes or run many configurations,
# the artifact replay on all 222 node traces and the artifact's own 45 cells, the closed forms against long
# simulated runs, the event-driven loop against the step-by-step one under whole-machine failures (~11 min in
# a fresh clone)
test-fingerprints: setup
	$(PY) -m pytest -q -m slow tests/test_published.py tests/test_artifact_differential.py tests/test_oobleck_artifact.py \
		tests/test_closed_forms.py tests/test_timing.py tests/test_event_driven.py -n $(TEST_WORKERS)

# cluster=torchft: installs the optional torchft, then its tests (real SIGKILLs; one and two launchers) on
# TEST_WORKERS processes: each test listens on ports of its own worker's block (tests/helpers/ports.py); ~16 min here
test-torchft: setup
	$(PY) -m pip install -q -c constraints.txt -r requirements-torchft.txt
	$(PY) -m pytest -q -m slow tests/test_torchft.py -n $(TEST_WORKERS)

bench: setup
	$(PY) bench/overhead.py
	$(PY) bench/mecefo.py
	$(PY) bench/numerics_free.py

# on a GPU machine (one line and exit 0 elsewhere): MFU, harness/plain, neighbour ratios, NCCL
bench-gpu: setup
	$(PY) bench/gpu.py

# collect every run under runs/ into analysis/out/{runs.csv,tables/,figures/}
figures: setup
	$(PY) -m analysis runs --out analysis/out

# the miniature of the paper's Tables 2-3: every method x none/low/medium/high, 2 jobs, under
# the default deterministic clock (hardware=cpu_ref): a rerun anywhere gives the same tables
paper-mini: setup
	@start=$$(date +%s); sweep=runs/sweeps/paper_mini_$$(date +%Y-%m-%d_%H-%M-%S); \
	$(PY) run.py -m experiment=paper_mini hydra.sweep.dir=$$sweep && \
	$(PY) -m analysis $$sweep --out analysis/out && \
	echo "paper-mini took $$(( $$(date +%s) - start )) s; tables and figures of $$sweep in analysis/out/"

# a sweep refuses a folder holding an earlier sweep's jobs (they would append to their files):
# the targets that sweep into a fixed folder move an earlier one aside, named by its time
keep_earlier_sweep = if [ -d $(1) ]; then mv $(1) $(1)_$$(date -r $(1) +%Y-%m-%d_%H-%M-%S); fi;

# the paper's Table 2 at the paper's scale (32 A100, 350M/1B/7B, 6,000-60,000 steps), numerics
# off, with the grid of failure readings; tables and figures in runs/sweeps/paper_table2/analysis
paper-table2: setup
	@start=$$(date +%s); $(call keep_earlier_sweep,runs/sweeps/paper_table2) \
	$(PY) run.py -m experiment=paper_table2 hydra.sweep.dir=runs/sweeps/paper_table2 && \
	echo "paper-table2 took $$(( $$(date +%s) - start )) s"

# the paper's Table 3 as a convergence study: MeCeFO at every level, 3 seeds, 300/1,000/3,000
# steps, two failure readings (63 jobs, ~2 h on 2 cores); runs/sweeps/paper_table3/analysis
paper-table3: setup
	@start=$$(date +%s); $(call keep_earlier_sweep,runs/sweeps/paper_table3) \
	$(PY) run.py -m experiment=paper_table3 hydra.sweep.dir=runs/sweeps/paper_table3 && \
	echo "paper-table3 took $$(( $$(date +%s) - start )) s"

# our checkpoint (Varuna), Oobleck and Bamboo on the Oobleck artifact's own scenarios (3 models x 5
# node traces), beside the numbers its simulator gives; tables in runs/sweeps/oobleck_artifact/analysis
oobleck-artifact: setup
	@start=$$(date +%s); $(call keep_earlier_sweep,runs/sweeps/oobleck_artifact) \
	$(PY) run.py -m experiment=oobleck_artifact hydra.sweep.dir=runs/sweeps/oobleck_artifact && \
	echo "oobleck-artifact took $$(( $$(date +%s) - start )) s"

# which method wins where: the decision map (1,008 runs; BENCHMARKS.md says how long), its
# closed-form and field anchors
DECISION_MAP_OUT ?= runs/decision_map_$(shell date +%Y-%m-%d_%H-%M-%S)
decision-map: setup
	$(PY) -m analysis.decision_map --out $(DECISION_MAP_OUT)

# rerun every study of RESULTS.md that a CPU regenerates (paper-mini, paper-table2, the ablation's
# memory table, the frontier sweep, the decision map; analysis/published.py's STUDIES) into a
# scratch folder and diff their tables against RESULTS.md: `identical` or a diff per table, then
# the list of what it did not regenerate; exits 1 if anything differs
RESULTS_OUT ?= runs/results_$(shell date +%Y-%m-%d_%H-%M-%S)
results: setup
	@start=$$(date +%s); \
	$(PY) -m analysis.published regenerate --out $(RESULTS_OUT); rc=$$?; \
	echo "results took $$(( $$(date +%s) - start )) s"; exit $$rc

# the analysis notebook (Table 2 readings, Table 3 with intervals, the miniature's figures)
notebook: setup
	$(PY) -m pip install -q -c constraints.txt -r requirements-notebook.txt
	$(VENV)/bin/jupyter lab analysis/paper.ipynb

clean:
	rm -rf .cache runs/2* runs/sweeps
