# The two commands a newcomer runs: `make demo` and `make test`. Both create .venv on first use and
# install only what they need: `make demo` aiorocketmq alone, `make test` also the extras of
# EXTRAS. A later target adds what is missing to the same .venv instead of reinstalling.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
PIPLOG := $(VENV)/pip.log
EXTRAS ?= dev,docs,release,uvloop,fastapi,spark,prometheus,opentelemetry
comma := ,

# Install stamps, named after pyproject.toml's checksum so that editing it makes them out of date:
# PROJECT is aiorocketmq itself (editable, core dependencies, the compiled codec when a compiler is
# there); $(INSTALLED)-with-<extras> a comma-separated set of extras on top of it. Installing a set
# also stamps each of its extras alone, and a set installs only its extras not stamped yet.
INSTALLED := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PROJECT := $(INSTALLED)-project
CODEC_SOURCES := setup.py $(shell find aiorocket -name '*.pyx' -o -name '*.pxd')

# The core requirements plus those of the extras named in argv[1], read from pyproject.toml:
# installing these rather than ".[extras]" keeps pip from rebuilding aiorocketmq itself.
REQUIREMENTS := import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	extras = p["optional-dependencies"]; \
	print(*p["dependencies"], *(r for e in sys.argv[1].split(",") for r in extras[e]), sep="\n")

.PHONY: demo test lint typecheck importlint docs unit interop rocketmq bench dist clean

$(VENV)/.created:
	@if test -x $(PY); then echo "==> upgrading pip in the virtualenv $(VENV)"; else \
		echo "==> creating the virtualenv $(VENV) ($(PYTHON) -m venv) and upgrading its pip"; \
		$(PYTHON) -m venv $(VENV) || exit 1; fi
	@$(PIP) install --quiet --upgrade pip >$(PIPLOG) 2>&1 || { cat $(PIPLOG); exit 1; }
	@touch $@

$(PROJECT): pyproject.toml $(CODEC_SOURCES) | $(VENV)/.created
	@find $(VENV) -maxdepth 1 -name '.installed-*' ! -name '$(notdir $(INSTALLED))-*' -delete
	@echo "==> installing aiorocketmq (editable, no extras) with its dependencies into $(VENV)"
	@echo "==> building the compiled codec (pure Python if Cython or a C compiler is missing)"
	@$(PIP) install --quiet -e . >$(PIPLOG) 2>&1 || { cat $(PIPLOG); exit 1; }
	@$(PY) -c "from aiorocket._protocol import accel; print('   ', accel.describe())"
	@touch $@

$(INSTALLED)-with-%: $(PROJECT)
	@missing=$$(for e in $(subst $(comma), ,$*); do \
		test -e $(INSTALLED)-with-$$e || printf '%s\n' $$e; done | paste -sd, -); \
	if test -n "$$missing"; then \
		echo "==> installing the extras [$$missing] of aiorocketmq into $(VENV)"; \
		$(PY) -c '$(REQUIREMENTS)' "$$missing" >$(VENV)/requirements.txt || exit 1; \
		$(PIP) install --quiet -r $(VENV)/requirements.txt >$(PIPLOG) 2>&1 \
			|| { cat $(PIPLOG); exit 1; }; \
	fi
	@for e in $(subst $(comma), ,$*); do touch $(INSTALLED)-with-$$e; done
	@touch $@

demo: $(PROJECT)
	$(PY) -m aiorocket demo

lint: $(INSTALLED)-with-$(EXTRAS)
	$(VENV)/bin/ruff check aiorocket tests benchmarks examples
	$(VENV)/bin/ruff format --check aiorocket tests benchmarks examples

typecheck: $(INSTALLED)-with-$(EXTRAS)
	$(VENV)/bin/mypy

importlint: $(INSTALLED)-with-$(EXTRAS)
	$(VENV)/bin/lint-imports

# The documentation site (mkdocs.yml) into site/; any warning fails. (Material's banner about
# MkDocs 2 is not a warning of this site.)
docs: export NO_MKDOCS_2_WARNING := 1
docs: $(INSTALLED)-with-docs
	$(VENV)/bin/mkdocs build --strict

# The suite but the Apache RocketMQ interop tests, which `make interop` runs per version; in
# UNIT_WORKERS processes (pytest-xdist, a module's tests in one process): most tests wait on
# sockets and timers, so two workers halve the time on two cores. UNIT_WORKERS=0: one process.
UNIT_WORKERS ?= 2
unit: $(INSTALLED)-with-$(EXTRAS)
	$(VENV)/bin/pytest --ignore=tests/interop/apache -n $(UNIT_WORKERS) --dist loadfile $(PYTEST_ARGS)

test: lint typecheck importlint docs unit

# An Apache RocketMQ release resolved from Maven Central (tests/interop/apache/pom.xml) into
# ~/.cache/aiorocket/rocketmq-$(ROCKETMQ_VERSION), a directory ROCKETMQ_HOME accepts; prints it.
rocketmq:
	@test -n "$(ROCKETMQ_VERSION)" || { echo "make rocketmq: set ROCKETMQ_VERSION, e.g. make rocketmq ROCKETMQ_VERSION=5.5.0"; exit 2; }
	@$(PYTHON) -m tests.interop.apache.maven $(ROCKETMQ_VERSION)

# The interop suite against Apache RocketMQ: the install ROCKETMQ_HOME names, else the release
# ROCKETMQ_VERSION names (resolved first, as `make rocketmq` does).
interop: $(INSTALLED)-with-$(EXTRAS)
	@test -n "$$ROCKETMQ_HOME$(ROCKETMQ_VERSION)" || { echo "make interop: set ROCKETMQ_VERSION (e.g. 5.5.0) or ROCKETMQ_HOME (an install's directory, with lib/*.jar)"; exit 2; }
	@if test -z "$$ROCKETMQ_HOME"; then $(PYTHON) -m tests.interop.apache.maven $(ROCKETMQ_VERSION) >/dev/null || exit 1; fi
	ROCKETMQ_VERSION=$(ROCKETMQ_VERSION) $(VENV)/bin/pytest tests/interop/apache $(PYTEST_ARGS)

bench: $(INSTALLED)-with-$(EXTRAS),bench
	$(PY) benchmarks/run_all.py

# Into dist/: the sdist, a manylinux wheel with the compiled modules (auditwheel repair) and a
# pure-Python py3-none-any wheel for every other platform; each wheel installed into a fresh
# virtualenv (CC=false) runs the README example against an embedded broker; then all three
# are checked as PyPI would render them (tests/packaging/wheels.py).
dist: $(INSTALLED)-with-release
	rm -rf dist
	$(PY) -m tests.packaging.wheels check dist
	$(VENV)/bin/twine check --strict dist/*

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis dist site
