# Railyard's public interface: make up|down|preview|test|review|bench [STACK=lab]
# Every target sets up what it needs first (virtualenv, engine toolchain, host packages), so on a
# fresh machine `make up` and `make test` are the only two commands.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
STACK ?= lab
PYTHON ?= python3.11
VENV := .venv
RY := $(VENV)/bin/railyard

.PHONY: up down preview test review bench venv toolchain deps setup help

help:
	@echo "make up|down|preview|test|review|bench [STACK=$(STACK)]"

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]'
	@touch $@

# Builds (or reuses from ~/.cache/railyard) the Pulumi CLI, language host and Kubernetes provider.
toolchain: venv
	@$(VENV)/bin/python -m railyard.engine.toolchain

# Debian packages the lab needs (sshd, traceroute, filesystem tools); installs only what is missing.
deps:
	@bash scripts/host-deps.sh

setup: toolchain deps

up: setup
	$(RY) up --stack $(STACK)

# FORCE=1: a long-lived stack's resources are protected; unprotect them deliberately, then destroy.
down: setup
	$(RY) down --stack $(STACK) $(if $(FORCE),--force)

preview: setup
	$(RY) preview --stack $(STACK)

test: setup
	$(VENV)/bin/pytest -q

# REVIEW_ARGS: railyard review's options, e.g. "--base origin/main --output review.md" (CI does).
review: setup
	$(RY) review $(REVIEW_ARGS)

bench: setup
	$(RY) bench
