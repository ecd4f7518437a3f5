# Two commands for a newcomer:  `make run` (set up + default experiment), `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# TORCH_SPEC selects the torch build: the CPU wheel by default; on a GPU cluster e.g.
#   make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: setup run test test-slow bench figures paper-mini clean

setup: $(VENV)/.installed .cache/corpus/lee_background.cor

$(VENV)/.installed: requirements.txt requirements-optional.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -c constraints.txt -r requirements.txt -r requirements-optional.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

.cache/corpus/lee_background.cor: | $(VENV)/.installed
	$(PY) scripts/fetch_corpus.py

run: setup
	$(PY) run.py

test: setup
	$(PY) -m pytest -q -m "not slow"

test-slow: setup
	$(PY) -m pip install -q -c constraints.txt -r requirements-notebook.txt
	$(PY) -m pytest -q -m slow

bench: setup
	$(PY) bench/overhead.py
	$(PY) bench/mecefo.py

# collect every run under runs/ into analysis/out/{runs.csv,tables/,figures/}
figures: setup
	$(PY) -m analysis runs --out analysis/out

# the miniature of the paper's Tables 2-3: every method x none/low/medium/high, 2 jobs
# (first every method's profile kernels are timed one job at a time on a quiet machine:
# the sweep's two parallel jobs then share one cached profile, and so one clock and trace)
paper-mini: setup
	@start=$$(date +%s); \
	$(PY) run.py -m experiment=paper_mini hydra.launcher.n_jobs=1 failure=none trainer.max_steps=1 trainer.eval_every=0 \
		hydra.sweep.dir=.cache/profile_warmup "~hydra.callbacks.collect" > /dev/null && \
	$(PY) run.py -m experiment=paper_mini hydra.sweep.dir=runs/sweeps/paper_mini_$$(date +%Y-%m-%d_%H-%M-%S) && \
	$(PY) -m analysis runs/sweeps --out analysis/out && \
	echo "paper-mini took $$(( $$(date +%s) - start )) s"

clean:
	rm -rf .cache runs/2* runs/sweeps
