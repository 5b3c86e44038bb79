# The README's two commands are `make demo` and `make test`; both build .venv from scratch when needed.
SHELL := /bin/bash
PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(abspath $(VENV))/bin/python
export PYSPARK_PYTHON := $(PY)
export PYSPARK_DRIVER_PYTHON := $(PY)
# Spark's Python workers import the examples from the repo root.
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
PYTEST_ARGS ?=

.PHONY: venv test demo bench kafka-jars broker clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

kafka-jars: venv
	bash scripts/kafka.sh fetch

test: venv kafka-jars
	$(PY) -m pytest $(PYTEST_ARGS)

demo: venv
	$(PY) -m examples.demo

bench: venv kafka-jars
	$(PY) -m pytest bench --benchmark-only $(PYTEST_ARGS)

broker: kafka-jars
	bash scripts/kafka.sh start

clean:
	rm -rf $(VENV) .cache
