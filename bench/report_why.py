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
    "kafka": "Records/s through Spark count only the time in micro-batches, where keyedstate-kafka reads at about the "
             "raw loop's CPU cost per record on the two cores the JVM also needs (bench/PROFILE-kafka.md). The "
             "four-batch variant adds Spark's fixed cost per micro-batch and each read task's first fetch. Where "
             "the run measured the floor in four micro-batches too, the ratios with the floor's time taken out say "
             "how much of that is Spark's hand-off of a Python source's rows: above 1, keyedstate-kafka's time "
             "beyond the floor's is below the raw loop's. A miss of a few percent is within the machine's drift "
             "even with interleaved rounds (see the per-round ratios in the Kafka section); a larger one means the "
             "reader's cost per record or per task grew.",
    "kafka_sink": "Both cores are saturated while a query writes, so records/s follow CPU per record. Before any "
                  "record is produced, Spark's Arrow hand-off to the Python worker costs about as much CPU as the "
                  "built-in sink's whole write once its JIT is warm; on top come librdkafka's per-record work and "
                  "its broker thread (the at-least-once bulk path already produces a slice of rows per call). The "
                  "built-in sink speeds up round after round as its JIT warms, so the ratio drifts down over the "
                  "rounds (per-round rows below); exactly-once also pays a fixed transactional round trip per write "
                  "task. Breakdown: docs/kafka.md, Write throughput.",
    "tws": "Both run Python per key; the margin depends on machine load (rounds run minutes apart, the load at "
           "the start of every round is in the Spark tables), so a narrow miss is within the run-to-run noise.",
    "per_key": "The per-key function pays Spark's per-group overhead once per key; keyed_process pays it once "
               "per key group. A miss means keyed_process's per-element Python work grew (see the bucketed row).",
    "bucketed": "keyed_process runs about ten Python calls per event (Flink's per-element contract: "
                "process_element, context, state, timer service), while the hand-written bucketed function "
                "aggregates each frame with one vectorized pandas groupby and touches its dict once per key. The "
                "gap grows with the number of events (2M table). Profile and proposed fixes: "
                "bench/PROFILE-spark.md.",
    "rocksdb_single_batch": "RocksDB mode pays a RocksDB get and put per element and a database open, changelog "
                            "and close per key group, where row mode works on Python dicts; it exists for state "
                            "that is too large to rewrite every batch (see the large-state section).",
    "bucketed_large": "keyed_process runs Flink's per-element contract in Python (process_element, the context, "
                      "ValueState and the timer calls for every event), while the bucketed function aggregates "
                      "each frame with one vectorized pandas groupby, so its cost per event falls as batches grow. "
                      "Both use the same JVM CPU; keyed_process's Python CPU is ~3x the bucketed function's. The "
                      "compiled fast path (value()/update() and the collected timer calls in C) cut the group "
                      "function's instructions per event by 12% (callgrind, deterministic), but the Spark wall "
                      "ratio did not move beyond the run-to-run noise (sixth session: rounds 0.47-0.51x, median "
                      "0.49x; this run: rounds 0.47-0.49x, median 0.47x). What is left is spread over the per-element "
                      "loop, the user function's own "
                      "bytecode, building the element Rows, applying and exporting the timers and Spark's "
                      "Arrow conversion; reaching 0.5x robustly needs the whole per-key loop in C or an opt-in "
                      "vectorised function. The two alternate round by round, so each round's ratio is free of the "
                      "machine's drift between minutes (2M table). See bench/PROFILE-spark.md.",
    "pyflink": "PyFlink in local mode has a fixed job start-up cost (shown under the Spark tables) and a blocking "
               "gRPC round trip per state access of a key outside its Python state cache.",
    "metrics": "Each key-group call measures clocks and counters and emits one encoded metrics row, and every "
               "output row carries the (null) metrics and tag columns through Arrow and past the observe and filter "
               "in Spark. In a one-batch query the JVM also compiles those paths (about 0.3 s of CPU in the first "
               "rounds), which a running query does once. Single rounds vary by several percent either way on 2 "
               "shared cores, so a median of few rounds can land on either side of the target.",
}
