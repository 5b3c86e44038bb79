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

.PHONY: venv test test-long compat demo bench kafka-jars s3proxy-jar broker clean

$(VENV)/.installed: pyproject.toml setup.py $(wildcard keyedstate/_fastpath_src/*.c keyedstate/_fastpath_src/*.h)
	test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

kafka-jars: venv
	bash scripts/kafka.sh fetch

# The whole suite on the pinned PySpark in three streams side by side, so that each spends what the others leave of
# the 2 cores. First, the tests that share this process's Spark session (marked spark). Beside them, the
# compatibility job followed by the tests that start and kill Spark drivers of their own (marked driver_process)
# and then, in a process and Spark JVM of their own, the tests that take several minutes (marked long: 300
# micro-batches on S3; after the driver_process tests in one process, its JVM died twice, silently). And beside
# both, the tests that need no Spark session: first in pure Python (KEYEDSTATE_PURE_PYTHON=1, without the Kafka
# ones), then with the compiled fast path. No more than two Spark applications ever share the cores (with three,
# Spark's Python workers missed their connect-back timeouts). The compatibility job's Spark 4.0 line runs its Spark
# subset in pure Python too. The other streams' pytest output is printed at the end, and the last lines name each
# stream's exit status and every failed test; after a failure, so does the end of each test process's Spark JVM
# output (.cache/spark-jvm, tests/local_spark.py: a JVM that exits says why there). ruff ([tool.ruff] in
# pyproject.toml) checks the package, the tests, the benchmarks and the scripts first, and mypy ([tool.mypy]) the
# package.
test: venv kafka-jars s3proxy-jar
	@mkdir -p .cache && rm -rf .cache/spark-jvm
	$(PY) -m ruff check keyedstate timers connectors tests bench scripts
	$(PY) -m mypy
	@{ COMPAT_ONE_AT_A_TIME=1 $(MAKE) --no-print-directory compat > .cache/compat.log 2>&1; compat=$$?; \
	   $(PY) -m pytest -m "driver_process and not long" --durations=20 $(PYTEST_ARGS) > .cache/beside-tests.log 2>&1; \
	   tests=$$?; \
	   $(PY) -m pytest -m long --durations=5 $(PYTEST_ARGS) >> .cache/beside-tests.log 2>&1; long=$$?; \
	   [ $$compat -eq 0 ] && [ $$tests -eq 0 ] && [ $$long -eq 0 ]; } & beside=$$!; \
	{ KEYEDSTATE_PURE_PYTHON=1 $(PY) -m pytest -q -m "not spark and not kafka and not long and not driver_process" \
	    $(PYTEST_ARGS) > .cache/pure-tests.log 2>&1; pure=$$?; \
	  $(PY) -m pytest -q -m "not spark and not long and not driver_process" --durations=10 $(PYTEST_ARGS) \
	    > .cache/no-spark-tests.log 2>&1; compiled=$$?; \
	  [ $$pure -eq 0 ] && [ $$compiled -eq 0 ]; } & nospark=$$!; \
	$(PY) -m pytest -m "spark and not long and not driver_process" --durations=25 $(PYTEST_ARGS) 2>&1 \
	  | tee .cache/spark-tests.log; \
	spark=$${PIPESTATUS[0]}; \
	wait $$nospark; nospark=$$?; \
	echo "---- beside the Spark tests: the tests that need no Spark session, in pure Python (.cache/pure-tests.log)" \
	  "and with the compiled fast path (.cache/no-spark-tests.log) ----"; \
	cat .cache/pure-tests.log .cache/no-spark-tests.log; \
	wait $$beside; beside=$$?; \
	echo "---- beside the Spark tests: the tests marked driver_process or long (.cache/beside-tests.log) ----"; \
	cat .cache/beside-tests.log; \
	echo "---- beside the Spark tests: make compat (.cache/compat.log) ----"; tail -n 40 .cache/compat.log; \
	echo "---- make test: the Spark tests exited $$spark, the tests without Spark $$nospark, the tests beside" \
	  "$$beside (driver_process, long and make compat) ----"; \
	grep -hE '^(FAILED|ERROR) ' .cache/spark-tests.log .cache/pure-tests.log .cache/no-spark-tests.log \
	  .cache/beside-tests.log .cache/compat.log || true; \
	[ $$spark -eq 0 ] && [ $$nospark -eq 0 ] && [ $$beside -eq 0 ] || { \
	  for log in .cache/spark-jvm/*.log; do [ -f "$$log" ] || continue; \
	    echo "---- the last lines of a test process's Spark JVM ($$log) ----"; tail -n 25 "$$log"; done; false; }

# The whole suite (every marker) with the compiled fast path off, one stream (~35 min idle): what `make test` does
# for the tests that need neither Spark nor Kafka, for all of them. Not part of `make test`, whose 40-minute budget
# on 2 cores it would exceed.
.PHONY: test-pure
test-pure: venv kafka-jars s3proxy-jar
	KEYEDSTATE_PURE_PYTHON=1 $(PY) -m pytest --durations=20 $(PYTEST_ARGS)

# Only the tests marked long (also part of `make test`): 300 micro-batches with state on S3.
test-long: venv kafka-jars s3proxy-jar
	$(PY) -m pytest -m long $(PYTEST_ARGS)

s3proxy-jar:
	bash scripts/s3proxy.sh fetch

# A subset of the suite on PySpark 3.5.x and 4.0.x (each in its own virtualenv under .cache/compat, rebuilt when
# pyproject.toml changes) and through Spark Connect: scripts/compat.sh. COMPAT_ARGS: e.g. "spark35" for one run.
COMPAT_ARGS ?=
compat: venv
	PY=$(PY) PYTHON_BOOTSTRAP=$(PYTHON_BOOTSTRAP) bash scripts/compat.sh $(COMPAT_ARGS)

demo: venv
	$(PY) -m examples.demo

# Needs `make broker` first; KAFKA_BOOTSTRAP overrides the address it printed.
.PHONY: demo-kafka
demo-kafka: venv
	$(PY) -m examples.demo --kafka --bootstrap-servers "$${KAFKA_BOOTSTRAP:-127.0.0.1:9092}"

# One run of every benchmark suite (about 100 min idle; bench/run.py prints its estimate), then bench/RESULTS.md and
# plots from its JSON in bench/results/. BENCH_ARGS: e.g. --profile smoke --results-dir /tmp/r --report-dir /tmp/r
# (a pipeline check).
.PHONY: bench-full bench-report
bench: venv kafka-jars
	$(PY) bench/run.py --command "make bench$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" $(BENCH_ARGS)

# The complete matrix: adds per_key and PyFlink at 2M events (~2.5 h).
bench-full: venv kafka-jars
	$(PY) bench/run.py --profile full --command "make bench-full$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" $(BENCH_ARGS)

# Issue 35's large-state run, too long for make bench: RocksDB mode at 200k and at 40M keys in one run (the fill in
# ten batches of 4M, then 201 later batches: the last 65, one base cycle, are reported alone; they start after the
# bases the bulk load left have been replaced, which may wait up to two cycles), about 40 min idle and 15 GB of disk;
# its own RESULTS.md beside its JSON.
.PHONY: bench-40m
bench-40m: venv
	LARGE_STATE_BENCH_SIZES=200k,40M LARGE_STATE_BENCH_VARIANTS=rocksdb LARGE_STATE_BENCH_ROCKSDB_BATCHES=201 \
		$(PY) bench/run.py --suites large_state \
		--results-dir bench/results/large-state-40M --report-dir bench/results/large-state-40M --command "make bench-40m"

# Regenerate bench/RESULTS.md and its plots from the stored results, without measuring.
bench-report: venv
	$(PY) bench/report.py $(BENCH_REPORT_ARGS)

broker: kafka-jars
	bash scripts/kafka.sh start

clean:
	rm -rf $(VENV) .cache
