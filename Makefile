# caisson: `make demo` runs the built-in example, `make test` runs the tests.
# Both install what is missing first (Debian packages, .venv) and start the Docker engine.

VENV := .venv
PY := $(VENV)/bin/python
CAISSON := $(VENV)/bin/caisson

.PHONY: setup engine images demo test bench clean

setup:
	@scripts/setup.sh

engine: setup
	@scripts/start-engine.sh

# The chamber and agent images, built offline from images/ (cached by recipe digest:
# a no-op when nothing changed; a few minutes on a fresh machine).
images: engine
	@$(PY) -m caisson.cli image build --name chamber
	@$(PY) -m caisson.cli image build --name agent

demo: engine
	@$(PY) -m caisson.cli image build --name chamber
	@$(PY) -m caisson.cli demo --out .demo
	@if [ -d .demo/study/study ]; then view=".demo/study"; else view=".demo/runs"; fi; \
		echo; echo "look at it in a browser (read-only, localhost only): $(CAISSON) view $$view"

# Two pytest-xdist workers (the CI machine has 2 cores; the Docker-bound tests mostly wait).
# --dist loadgroup hands tests out one at a time, round-robin (tests marked xdist_group
# together), so the long tests, collected first, start on both workers at once; tests
# marked engine_exclusive run alone (tests/conftest.py). A failure prints as in a serial run.
test: images
	$(PY) -m mypy
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

bench: setup
	$(PY) benchmarks/ledger_bench.py

clean:
	rm -rf .demo .pytest_cache .hypothesis
