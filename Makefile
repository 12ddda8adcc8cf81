# Two commands on a fresh machine: `make serve` serves the default model; `make test` runs every check.
.PHONY: serve test lint bench setup test-setup

setup:
	@scripts/bootstrap.sh

serve: setup
	.venv/bin/cirrus serve

test-setup:
	@scripts/bootstrap.sh --test-services

lint: test-setup
	.venv/bin/ruff check src tests bench engine
	.venv/bin/ruff format --check src tests bench engine
	.venv/bin/mypy

test: lint
	.venv/bin/pytest -q

bench: setup
	.venv/bin/python -m bench.core
	.venv/bin/python -m bench.serving
