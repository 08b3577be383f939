# heavytail — two commands do all the set-up on a fresh machine:
#   make report   # set up, then execute every notebook with the CPU default (params/cpu.yaml)
#   make test     # set up, then lint (ruff) and run the test suite (what .ci/run calls)
#
# The active environment ($VIRTUAL_ENV or $CONDA_PREFIX) is used when there is one; otherwise a
# .venv is created here. torch is installed first and explicitly, because a bare `torch` (or the
# package's own `torch>=2.6` range) lets pip pull a multi-GB CUDA build. GPU users override:
#   make report TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"

PYTHON     ?= python3
TORCH_SPEC ?= torch==2.13.0
EXTRAS     ?= notebooks,test
PARAMS     ?= params/cpu.yaml

ifneq ($(strip $(VIRTUAL_ENV)),)
ENV := $(VIRTUAL_ENV)
else ifneq ($(strip $(CONDA_PREFIX)),)
ENV := $(CONDA_PREFIX)
else
ENV := .venv
endif
PY    := $(ENV)/bin/python
# Re-installs when pyproject.toml changes; delete the stamp to force it (e.g. after changing TORCH_SPEC).
STAMP := $(ENV)/.heavytail-installed

.PHONY: help install test report lab bench clean

help:
	@echo "make report  - set up and run the whole report on the CPU default ($(PARAMS))"
	@echo "make test    - set up and run the test suite"
	@echo "make lab     - open the notebooks in JupyterLab"
	@echo "make bench   - run the benchmark scripts (quick mode)"
	@echo "environment: $(ENV)"

$(PY):
	$(PYTHON) -m venv $(ENV)

# The last step builds the fused C++ flash loop once per machine, here rather than inside the first training run
# (about a minute); where it cannot build, a warning says why and attention runs on the compiled passes.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install $(TORCH_SPEC)
	$(PY) -m pip install -e '.[$(EXTRAS)]'
	$(PY) -c "from heavytail.science import flash_native; flash_native.extension()"
	touch $@

install: $(STAMP)

# The test files run side by side, one pytest-xdist worker per core (at most 4), a file's tests on one worker; the
# smoke report is built once per run and shared (tests/conftest.py). The slowest tests are listed at the end.
test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile --durations=25

report: install
	$(PY) -m heavytail report $(PARAMS)

# The repository's own JupyterLab defaults (.jupyter/lab/settings/overrides.json: py:percent files open in
# the jupytext notebook view); the user's settings still win, and their global configuration is not touched.
lab: install
	$(PY) -m jupyter lab --LabApp.app_settings_dir=$(CURDIR)/.jupyter/lab/settings notebooks/

# Each writes a JSON record under benchmarks/results/ (provenance, threads, every measurement).
bench: install
	$(PY) benchmarks/bench_energy.py --quick
	$(PY) benchmarks/bench_attention_cpu.py --quick
	$(PY) benchmarks/bench_train_cpu.py --quick
	$(PY) benchmarks/bench_flash_native.py --rounds 4
	$(PY) benchmarks/bench_subnormals.py --rounds 4

clean:
	rm -rf outputs/*/ .pytest_cache
