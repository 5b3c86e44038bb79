#!/usr/bin/env bash
# The compatibility job (`make compat`, also the second step of `make test`): a representative subset of the suite
# (a harness-oracle example, timers, exactly-once restart after SIGKILL, bad input, every output and
# read_keyed_state) on the newest PySpark 3.5.x and 4.0.x, each in its own virtualenv of
# `pip install .[spark35|spark40,test]` under .cache/compat/ (there also late elements, the version checks and the
# docs' Spark example), then through Spark Connect on the main virtualenv's PySpark.
#
#   scripts/compat.sh [spark35] [spark40] [connect]      (default: all three, in that order)
#
# PY: the main virtualenv's python (for the Connect run). COMPAT_DIR: where the virtualenvs live. A virtualenv is
# rebuilt when pyproject.toml or setup.py changed since it was built. PYTHON_BOOTSTRAP: the python that creates them.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
COMPAT_DIR=${COMPAT_DIR:-.cache/compat}
PYTHON_BOOTSTRAP=${PYTHON_BOOTSTRAP:-python3}
RUNS=("$@")
[ ${#RUNS[@]} -gt 0 ] || RUNS=(spark35 spark40 connect)

# Run everywhere: a harness-oracle example, timers of an idle key, exactly-once across SIGKILLs and restarts, bad
# input that must stop the query with our error, every output plus read_keyed_state, and the metrics in the query's
# progress (observed metrics).
SUBSET=(
    "tests/spark/test_examples_match_harness.py::test_count_with_timeout_on_spark_equals_the_harness[rocksdb-7]"
    "tests/spark/test_timers_on_spark.py::test_five_event_time_timers_fire_in_order_for_an_idle_key[heap]"
    "tests/spark/test_exactly_once.py::test_sigkill_at_three_points_then_restart_gives_the_uninterrupted_result[rocksdb-store-heap]"
    "tests/spark/test_bad_input.py::test_a_user_exception_names_function_key_and_element_and_the_checkpoint_survives[heap]"
    "tests/spark/test_outputs_and_state_reader.py::test_main_side_and_metrics_outputs_and_the_state_read_back[rocksdb-store]"
    "tests/spark/test_progress_metrics.py::test_each_metric_in_the_progress_counts_what_the_batches_did[heap]"
)
# Only on the older Spark lines: what depends on the version rather than on the session kind (the watermark
# marker, the state reader's other provider, the version checks) and the docs' example, which builds its own
# classic session.
OLDER_SPARK=(
    tests/test_spark_compat.py
    tests/spark/test_late_events.py
    "tests/spark/test_outputs_and_state_reader.py::test_main_side_and_metrics_outputs_and_the_state_read_back[default-store]"
    "tests/docs/test_code_blocks.py::test_code_blocks_run[spark.md]"
)

stamp() { cat pyproject.toml setup.py | sha256sum | cut -c1-16; }

# A virtualenv with the package and its `extra` pins, as a user would install them (not editable: the wheel build is
# part of what is checked). The tests import keyedstate from the checkout (PYTHONPATH), the dependencies from here.
venv_ready() { [ -f "$COMPAT_DIR/$1/.installed-$(stamp)" ]; }

compat_venv() {
    local extra=$1 venv="$COMPAT_DIR/$1"
    if ! venv_ready "$extra"; then
        rm -rf "$venv"
        "$PYTHON_BOOTSTRAP" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet "$(echo "$COMPAT_DIR"/wheel/keyedstate-*.whl)[$extra,test]"
        touch "$venv/.installed-$(stamp)"
    fi
    echo "$venv/bin/python"
}

# One wheel for both virtualenvs: two builds in the checkout at once would share its build/ directory.
for run in "${RUNS[@]}"; do
    if [ "$run" != connect ] && ! venv_ready "$run"; then
        rm -rf "$COMPAT_DIR/wheel"
        "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$COMPAT_DIR/wheel" .
        break
    fi
done

# The Spark 4.0 line runs with the compiled fast path turned off, so the subset's Spark paths also run in pure
# Python (the main suite runs them with the extension).
PURE_PYTHON_LINE=spark40

run_subset() {  # label python remote pure-python pytest-args...
    local label=$1 python=$2 remote=$3 pure=$4 started=$SECONDS
    shift 4
    [ -z "$pure" ] || label="$label, KEYEDSTATE_PURE_PYTHON=1"
    echo "== compat: $label ($("$python" -c 'import pyspark, pyarrow, pandas, numpy; print(f"pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, pandas {pandas.__version__}, numpy {numpy.__version__}")'))"
    # SPARK_HOME is not set: local[...] masters write nothing below the installed pyspark package. A run's JVMs live
    # a few minutes, too short for the C2 compiler to pay: C1 only took the Spark 4.0 line from 152 s and about 225
    # core-seconds to 143 s and 200 (tests/short_lived_jvms.py does the same for the suite's short-lived JVMs).
    local c1_only=-XX:TieredStopAtLevel=1 java_options=${JDK_JAVA_OPTIONS:-}
    [[ " $java_options " == *" $c1_only "* ]] || java_options="${java_options:+$java_options }$c1_only"
    env PYSPARK_PYTHON="$python" PYSPARK_DRIVER_PYTHON="$python" PYTHONPATH="$PWD" \
        KEYEDSTATE_TEST_SPARK_REMOTE="$remote" KEYEDSTATE_PURE_PYTHON="$pure" JDK_JAVA_OPTIONS="$java_options" \
        "$python" -m pytest -q --durations=5 "$@"
    echo "== compat: $label passed in $((SECONDS - started)) s"
}

# Both virtualenvs are built first, side by side (downloading and unpacking PySpark is most of it).
builds=()
lines=()
for run in "${RUNS[@]}"; do
    case "$run" in
        spark35 | spark40) compat_venv "$run" > /dev/null & builds+=($!); lines+=("$run") ;;
        connect) ;;
        *) echo "unknown run $run (spark35, spark40, connect)" >&2; exit 2 ;;
    esac
done
for build in "${builds[@]}"; do wait "$build"; done
echo "== compat: virtualenvs ready after $SECONDS s"

# The Spark lines run side by side too: much of a Spark test is waiting (JVM start-up, triggers, the exactly-once
# job's restarts), so two of them share 2 cores with little slowdown. Each line's output is printed when it ends.
# COMPAT_ONE_AT_A_TIME=1 (make test, where the main suite runs beside this job): one Spark line at a time, so three
# Spark applications never share the 2 cores (Spark's Python workers then miss their connect-back timeout).
failed=0
pids=()
for line in "${lines[@]}"; do
    run_subset "$line" "$(compat_venv "$line")" "" "$([ "$line" = "$PURE_PYTHON_LINE" ] && echo 1)" "${SUBSET[@]}" "${OLDER_SPARK[@]}" > "$COMPAT_DIR/$line.log" 2>&1 &
    if [ "${COMPAT_ONE_AT_A_TIME:-0}" = 1 ]; then
        wait "$!" || failed=1
        cat "$COMPAT_DIR/$line.log"
    else
        pids+=($!)
    fi
done
for index in "${!pids[@]}"; do
    wait "${pids[$index]}" || failed=1
    cat "$COMPAT_DIR/${lines[$index]}.log"
done
[ "$failed" = 0 ]

for run in "${RUNS[@]}"; do
    if [ "$run" = connect ]; then
        run_subset "Spark Connect" "$PY" "local[2]" "" "${SUBSET[@]}"
    fi
done
echo "== compat: all runs passed in $SECONDS s"
