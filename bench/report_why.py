"""Why a benchmark target is missed: fixed prose from the per-area analyses (bench/PROFILE-*.md), which
bench/report.py prints under the targets table only on a miss. Update it when an analysis changes."""

WHY = {
    "state": "The default value codec (msgpack plus its Python wrapper) costs most of the gap on its own: the "
             "raw+codec loop in the state section is the ceiling for any store built on that codec. The RocksDB "
             "store layer (prefix concatenation, type check) and the primitive layer add the rest.",
    "timers": "The whole service pays the per-timer contract that a bare heapq loop does not: on register, "
              "timestamp validation and the current key's prefix; on fire, building the InternalTimer handed to "
              "the callback, the key context, the namespace and the callback call. The partitioned queue alone "
              "(timers section) is the data-structure part.",
    "kafka": "Compare addBatch (Spark's read and count on local[2]) with the raw loop's whole run in the Kafka "
             "section: in the runs this text was written from, the reading itself was faster (3.5 s against 4.1 s "
             "for 2,000,000 records). The miss is a fixed cost per query "
             "that neither the raw loop nor the JVM source pays: for every streaming query Spark starts a fresh "
             "python_streaming_source_runner process (not forked from its worker daemon), which imports pyspark "
             "from pyspark.zip, and Python never caches bytecode for zip imports. That is ~1.8-2.2 s in 'outside "
             "trigger', ~1.1 s of it recompiling ~220 pyspark modules; keyedstate's own share (its imports and "
             "broker round trips) is ~0.2 s. It is paid once per query, so long-running queries amortise it. "
             "Analysis: bench/PROFILE-kafka.md.",
    "tws": "Both run Python per key; the margin depends on machine load (rounds run minutes apart, the load at "
           "the start of every round is in the Spark tables), so a narrow miss is within the run-to-run noise.",
    "per_key": "The per-key function pays Spark's per-group overhead once per key; keyed_process pays it once "
               "per key group. A miss means keyed_process's per-element Python work grew (see the bucketed row).",
    "bucketed": "keyed_process runs about ten Python calls per event (Flink's per-element contract: "
                "process_element, context, state, timer service), while the hand-written bucketed function "
                "aggregates each frame with one vectorized pandas groupby and touches its dict once per key. The "
                "gap grows with the number of events (2M table). Profile and proposed fixes: "
                "bench/PROFILE-spark.md.",
    "bucketed_large": "keyed_process runs Flink's per-element contract in Python (about 7 us per event: "
                      "process_element, the context, ValueState, and a timer delete plus register per element), "
                      "while the bucketed function aggregates each frame with one vectorized pandas groupby, so "
                      "its cost per event falls as batches grow. py-spy of a Spark worker at 2M: the per-element "
                      "loop is ~56% of the worker's CPU, the user function's timer delete and register calls "
                      "alone ~39%; Spark's Arrow-to-pandas conversion of the input ~10%; encoding the state row "
                      "~9%. No per-element Python API closes a 2-3x gap to a vectorized function at this size; "
                      "see bench/PROFILE-spark.md.",
    "pyflink": "PyFlink in local mode has a fixed job start-up cost (shown under the Spark tables) and a blocking "
               "gRPC round trip per state access of a key outside its Python state cache.",
}
