# Each target installs what it needs first, so a fresh clone needs only `make test`.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
# The extras the test suite and the reproductions use; tests of a missing extra skip cleanly.
EXTRAS ?= all
# torch first and pinned: on this project's machines 2.13.0 is the CPU build already on disk; a bare
# `torch` requirement would pull a multi-GB CUDA build. Elsewhere pip's normal choice is fine.
TORCH_SPEC ?= torch==2.13.0
PIP_FLAGS ?= -q --progress-bar off
# The TextGrad equivalence test (tests/tpo) runs where textgrad is installed; `test-all` installs it.
TEXTGRAD_SPEC ?= textgrad==0.1.8
# textgrad writes a log file into ./logs/ when imported, and litellm (its dependency) fetches a model
# price list from the network when imported: keep the first out of the work tree, the second local.
export TEXTGRAD_LOG_DIR ?= $(or $(TMPDIR),/tmp)/icml25-textgrad-logs
export LITELLM_LOCAL_MODEL_COST_MAP ?= True

.PHONY: install test test-all repro repro-full lint format bench bench-deps docs

install:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install $(PIP_FLAGS) "$(TORCH_SPEC)" || $(PIP) install $(PIP_FLAGS) torch
	$(PIP) install $(PIP_FLAGS) -e ".[$(EXTRAS)]"

test: install
	$(PYTHON) -m pytest -m "not slow and not gpu" $(PYTEST_ARGS)

# Everything but the GPU tests: the slow ones, the torchsort cross-checks (bench-deps builds it) and
# the TextGrad equivalence test (textgrad pulls in
# litellm, boto3, aiohttp, ..., which is why it is not in an extra).
test-all: bench-deps
	$(PIP) install $(PIP_FLAGS) "$(TEXTGRAD_SPEC)"
	$(PYTHON) -m pytest -m "not gpu" $(PYTEST_ARGS)

# Papers run REPRO_JOBS at a time, each in its own process with its own fixed thread count (one by
# default), so the numbers are those of a sequential run: two keep both cores of a 2-core machine busy.
REPRO_JOBS ?= 2

repro: install
	$(PYTHON) -m icml25 repro --jobs $(REPRO_JOBS) $(REPRO_ARGS)

repro-full: install
	$(PYTHON) -m icml25 repro --full --jobs $(REPRO_JOBS) $(REPRO_ARGS)

# The site: docs/*.md, the README's table as the front page and an API reference per package
# (tools/mkdocs_hooks.py), built in strict mode (any warning, broken link or bad reference fails).
docs: install
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict -d site

lint: install
	$(PYTHON) -m ruff check src tests benchmarks
	$(PYTHON) -m ruff format --check src tests benchmarks

format: install
	$(PYTHON) -m ruff format src tests benchmarks
	$(PYTHON) -m ruff check --fix src tests benchmarks

# torchsort ships only a source tarball; its setup.py builds a CUDA extension whenever nvcc is on
# PATH, so it is built here without nvcc and without build isolation (it needs the installed torch).
bench-deps: install
	@$(PYTHON) -c "import torchsort" 2>/dev/null || \
		env PATH="$$(dirname $$(command -v $(PYTHON))):/usr/bin:/bin" $(PIP) install $(PIP_FLAGS) --no-build-isolation "torchsort==0.1.10" || \
		echo "torchsort did not build: the benchmark reports it as not installed"

bench: bench-deps
	$(PYTHON) -m icml25 bench $(BENCH_ARGS)
