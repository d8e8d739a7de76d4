# The two commands a newcomer runs: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
EXTRAS ?= dev,uvloop,fastapi,spark,prometheus,opentelemetry
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test lint typecheck importlint unit interop bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@rm -f $(VENV)/.installed-*
	$(PY) -m pip install --quiet --upgrade pip 2>$(VENV)/pip.log || { cat $(VENV)/pip.log; exit 1; }
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]" 2>$(VENV)/pip.log || { cat $(VENV)/pip.log; exit 1; }
	@$(PY) -c "import aiorocket, pytest, mypy, hypothesis" || { echo "installing into $(VENV) failed"; exit 1; }
	@$(PY) -c "from aiorocket._protocol import accel; print(accel.describe())"
	@touch $@

demo: $(STAMP)
	$(PY) -m aiorocket demo

lint: $(STAMP)
	$(VENV)/bin/ruff check aiorocket tests benchmarks examples
	$(VENV)/bin/ruff format --check aiorocket tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

importlint: $(STAMP)
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(VENV)/bin/pytest

test: lint typecheck importlint unit

# The interop suite alone, against the Apache RocketMQ install ROCKETMQ_HOME names.
interop: $(STAMP)
	@test -n "$$ROCKETMQ_HOME" || { echo "make interop: set ROCKETMQ_HOME to an Apache RocketMQ install (its lib/*.jar)"; exit 2; }
	$(VENV)/bin/pytest tests/interop/apache $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[$(EXTRAS),bench]" 2>$(VENV)/pip.log || { cat $(VENV)/pip.log; exit 1; }
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
