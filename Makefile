# Railyard's public interface: make up|down|preview|test|review|bench [STACK=lab]; make fresh-check
# Every target sets up what it needs first (virtualenv, engine toolchain, host packages), so on a
# fresh machine `make up` and `make test` are the only two commands.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
STACK ?= lab
PYTHON ?= python3.11
VENV := .venv
RY := $(VENV)/bin/railyard
# Independent set-up steps overlap: apt's downloads and installs (deps) beside pip's and the Go
# builds (venv, then toolchain), which wait on the network or leave a core idle part of the time.
# Each step's lines are whole lines prefixed `railyard:`, so interleaving keeps them readable.
MAKEFLAGS += -j3
TIMED := bash scripts/timed.sh

.PHONY: up down preview test review bench venv toolchain toolchain-all deps bytecode setup setup-all help fresh-check fresh-root-check

help:
	@echo "make up|down|preview|test|review|bench [STACK=$(STACK)]; make fresh-check|fresh-root-check"

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	@$(TIMED) virtualenv bash -c 'test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV) && \
	  $(VENV)/bin/pip install -q -e ".[test]"'
	@touch $@

# Builds (or reuses from ~/.cache/railyard) the Pulumi CLI and language host. The parts only some
# stacks use are built, with the same progress lines, by the first command of a stack that uses
# them: the Kubernetes provider (a Kubernetes layer, or the CoreWeave driver), the lab's S3 server
# (an object tier) and the lab's control plane (a lab stack with Kubernetes). The default stack's
# first `make up` waits for none it does not run.
toolchain: venv
	@$(TIMED) "engine build" $(VENV)/bin/python -m railyard.engine.toolchain --engine-only

# Everything the tests and benchmarks use, built before the first test with progress lines: the
# engine, the Kubernetes provider, weed, and the control plane with the SR-IOV operator's renderer
# (whose cold build otherwise ran silent, minutes long, inside the first test that needed it).
toolchain-all: venv
	@$(TIMED) "engine and provider builds" $(VENV)/bin/python -m railyard.engine.toolchain
	@$(TIMED) "control plane build" $(VENV)/bin/python -m railyard.engine.control_plane --with-test-tools

# Debian packages the lab needs (sshd, traceroute, filesystem tools); installs only what is missing.
deps:
	@$(TIMED) "Debian packages" bash scripts/host-deps.sh

# The project's own modules compiled once, as pip compiles an installed package's (an editable
# install is not compiled). Where the environment sets PYTHONDONTWRITEBYTECODE, as this project's
# machines do, Python never writes them itself, and every Pulumi program run compiled some eighty
# modules from source first: 0.2 s of CPU before its first resource (docs/benchmarks.md).
# compileall rewrites only what changed.
bytecode: venv
	@$(TIMED) bytecode env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/python -m compileall -q railyard components __main__.py

setup: toolchain deps bytecode
setup-all: toolchain-all deps bytecode

up: setup
	$(RY) up --stack $(STACK)

# FORCE=1: a protected stack (any driver but the lab's, or railyard:protect: true) is unprotected
# deliberately, then destroyed.
down: setup
	$(RY) down --stack $(STACK) $(if $(FORCE),--force)

preview: setup
	$(RY) preview --stack $(STACK)

# The tiers cheapest first (pyproject.toml's testpaths), each named as it starts; the 25 slowest
# tests at the end. TEST_WORKERS processes take one test file each at a time, in the order
# tests/conftest.py sorts them (tiers cheapest first, the longest lab modules first within the lab;
# --no-loadscope-reorder keeps that order rather than xdist's most-tests-first). A lab test spends
# most of its time waiting on daemons, SSH and reboots, so 4 workers keep 2 cores busier than 1.
TEST_WORKERS ?= 4
test: setup-all
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# REVIEW_ARGS: railyard review's options, e.g. "--base origin/main --output review.md" (CI does).
review: setup
	$(RY) review $(REVIEW_ARGS)

bench: setup-all
	$(RY) bench

# A rehearsal of a fresh machine (scripts/fresh-check.sh): HEAD cloned, every cache empty, then
# make up, make down and make test there, each timed. Not part of `make test`: it takes a cold
# build plus the test suite. Run it after changing set-up (Makefile, toolchain, scripts, pins).
fresh-check:
	@bash scripts/fresh-check.sh

# The same rehearsal inside a fresh Debian 12 root (scripts/fresh-root.sh), where none of the
# project's Debian packages is installed, so the apt step is timed too. About an hour and a quarter.
fresh-root-check:
	@bash scripts/fresh-root.sh
