"""The sections of bench/RESULTS.md for the suites that run in one Python process: state primitives, timers, the
test harness and the Kafka source and sink (bench/report.py assembles the report)."""

from __future__ import annotations

import statistics


def find_bench(run: dict, suite: str, name: str) -> dict | None:
    """One benchmark's pytest-benchmark record in ``run`` (see report.load_run), or None when it was not run."""
    return run["suites"].get(suite, {}).get(name)


def _load(b: dict) -> str:
    info = b.get("extra_info", {})
    return f"{info['load_before']:.1f}-{info['load_after']:.1f}" if "load_before" in info else "-"


def _per_second_table(benches: list[tuple[str, dict]], unit_key: str, unit: str) -> list[str]:
    lines = [f"| benchmark | {unit}/s (best round) | {unit}/s (median round) | rounds | load |",
             "|---|---:|---:|---:|---|"]
    for label, b in benches:
        n = b["extra_info"].get(unit_key, 0)
        lines.append(f"| {label} | {n / b['stats']['min']:,.0f} | {n / b['stats']['median']:,.0f} | "
                     f"{b['stats']['rounds']} | {_load(b)} |")
    return lines + [""]


def state_section(run: dict) -> list[str]:
    suite = run["suites"].get("state")
    if not suite:
        return ["## State primitives (issue 2)", "", "Not measured in this run.", ""]
    labels = {"test_raw_rocksdict_get_put_reference[one-key]": "raw rocksdict get+put, one key (reference)",
              "test_raw_rocksdict_get_put_reference[1000-keys]": "raw rocksdict get+put, 1,000 keys (reference)"}
    for backend in ("rocksdb", "heap"):
        name = "RocksDB" if backend == "rocksdb" else "heap"
        labels.update({f"test_value_state_value_and_update[{backend}]": f"{name} ValueState value()+update(), one key",
                       f"test_value_state_value_and_update_across_keys[{backend}]":
                           f"{name} ValueState set_current_key()+value()+update(), 1,000 keys",
                       f"test_list_state_add[{backend}]": f"{name} ListState add",
                       f"test_map_state_put_get[{backend}]": f"{name} MapState put+get"})
    lines = ["## State primitives (issue 2)", "",
             "`bench/test_state_bench.py`: every round does the same number of operations (an operation is one "
             "value()+update() pair, one get+put for the raw loop, one add, or one put+get pair); ops/s = "
             f"{next(iter(suite.values()))['extra_info'].get('ops_per_round', '?'):,} operations / round time.", ""]
    lines += _per_second_table([(label, suite[n]) for n, label in labels.items() if n in suite], "ops_per_round", "ops")
    ratio = suite.get("test_value_state_to_raw_rocksdict_ratio")
    if ratio:
        info = ratio["extra_info"]
        lines += ["Target metric, interleaved: the loops alternate round by round on the same database, column "
                  f"family and two keys ({info.get('rounds', '?')} rounds); the key changes on every operation, so "
                  "each ValueState operation reads RocksDB and writes the previous key's value back; median of the "
                  f"per-round throughput ratios to the raw loop (raw get+put: {info['raw_ns_per_pair_median']:,} ns "
                  "per pair, median):", "",
                  "| loop | throughput vs raw get+put |", "|---|---:|",
                  f"| raw+codec: raw get+put plus the default codec (ceiling for any store) | "
                  f"{info['ratio_median[raw+codec]']:.2f}x |",
                  f"| RocksDB value store get/put | {info['ratio_median[store]']:.2f}x |",
                  f"| **ValueState value()+update(), key changed every operation (as between key runs)** | "
                  f"**{info['ratio_median[state]']:.2f}x** |"]
        if "ratio_median[state_one_key]" in info:
            lines.append("| ValueState value()+update() on one key (the write-back memo serves it) | "
                         f"{info['ratio_median[state_one_key]']:.2f}x |")
        lines.append("")
    return lines


def _ms(b: dict, stat: str) -> str:
    return f"{b['stats'][stat] * 1000:,.0f} ms"


def timers_section(run: dict) -> list[str]:
    suite = run["suites"].get("timers")
    if not suite:
        return ["## Timers (issue 3)", "", "Not measured in this run.", ""]
    lines = ["## Timers (issue 3)", ""]
    rf = {k: suite.get(f"test_register_and_fire[{k}]") for k in ("heapq", "heap", "rocksdb")}
    if rf["heapq"] and rf["heap"]:
        n = rf["heap"]["extra_info"]["timers"]
        lines += [f"Register {n:,} timers over {n // 10:,} keys (key context set per key), then one watermark "
                  "fires them all with a no-op callback; the reference is a heappush/heappop loop.", "",
                  "| | min | median | vs heapq (min) | load |", "|---|---:|---:|---:|---|"]
        for kind, label in (("heapq", "heapq push/pop loop"), ("heap", "heap timer storage"),
                            ("rocksdb", "RocksDB timer storage")):
            if rf[kind]:
                b = rf[kind]
                lines.append(f"| {label} | {_ms(b, 'min')} | {_ms(b, 'median')} | "
                             f"{rf['heapq']['stats']['min'] / b['stats']['min']:.2f}x | {_load(b)} |")
        lines.append("")
    inter = suite.get("test_heap_timers_vs_heapq_interleaved")
    if inter:
        i = inter["extra_info"]
        lines += [f"Target metric, interleaved: best CPU time of {i.get('repeats', 9)} alternating runs.", "",
                  "| | best CPU time | throughput vs heapq |", "|---|---:|---:|",
                  f"| heapq on (ts, key) tuples | {i['heapq_best_cpu_s'] * 1000:,.0f} ms | 1.00x |",
                  f"| **heap timer service** (register + fire, key context, callback) | "
                  f"{i['service_best_cpu_s'] * 1000:,.0f} ms | **{i['service_ratio']:.2f}x** |",
                  f"| heapq on the same InternalTimer tuples | {i['heapq_on_timers_best_cpu_s'] * 1000:,.0f} ms | "
                  "1.00x |",
                  f"| key-group partitioned heap queue alone | {i['queue_best_cpu_s'] * 1000:,.0f} ms | "
                  f"{i['queue_ratio']:.2f}x |", ""]
    queue = [(k, suite.get(f"test_queue_choice[{k}]")) for k in ("bare_heapq", "heapq_set", "sorted_set",
                                                                  "sorted_list_and_set")]
    queue = [(k, b) for k, b in queue if b]
    if queue:
        bare = queue[0][1]["stats"]["min"]
        lines += ["Queue data structure (register, delete 10 %, pop all; `heapq_set` is the one used):", "",
                  "| structure | min | vs bare heapq |", "|---|---:|---:|"]
        lines += [f"| {k} | {_ms(b, 'min')} | {b['stats']['min'] / bare:.2f}x time |" for k, b in queue] + [""]
    restore = [(s, suite.get(f"test_restore_peak_memory[{s}]")) for s in ("rocksdb", "heap")]
    restore = [(s, b) for s, b in restore if b]
    if restore:
        lines += [f"Opening a timer service over {restore[0][1]['extra_info']['timers']:,} restored RocksDB timers "
                  "and firing the first one (peak traced Python memory, tracemalloc; time includes its overhead):",
                  "", "| timer storage | peak traced memory | time |", "|---|---:|---:|"]
        lines += [f"| {s} | {b['extra_info']['peak_traced_mib']:.1f} MiB | {b['stats']['min']:.2f} s |"
                  for s, b in restore] + [""]
    return lines


def harness_section(run: dict) -> list[str]:
    benches = [b for b in (find_bench(run, "harness", f"test_count_with_timeout_harness_throughput[{k}]")
                           for k in ("heap", "rocksdb")) if b]
    if not benches:
        return ["## Harness throughput (issue 4)", "", "Not measured in this run.", ""]
    info = benches[0]["extra_info"]
    lines = ["## Harness throughput (issue 4)", "",
             f"Flink's count-with-timeout in `KeyedProcessHarness`: {info['elements']:,} elements over "
             f"{info['keys']:,} keys (each updates ValueState and registers an event-time timer), then one watermark "
             "that fires every timer; a fresh harness per round.", ""]
    return lines + _per_second_table([(b["extra_info"]["backend"], b) for b in benches], "elements", "elements")


def kafka_section(run: dict) -> list[str]:
    title = ["## Kafka source (issue 6)", ""]
    bench = find_bench(run, "kafka", "test_kafka_sources_interleaved")
    if not bench or not bench.get("extra_info", {}).get("rounds"):
        return title + ["Not measured in this run.", ""]
    info = bench["extra_info"]
    rounds, records, batches = info["rounds"], info["records"], info["batches"]
    lines = title + [
        f"`bench/test_kafka_source.py`: one local KRaft broker, one topic of {records:,} records (4 partitions, "
        f"100-byte values); Spark `local[2]` reads the whole topic with Trigger.AvailableNow, in one micro-batch or "
        f"in {batches} (maxOffsetsPerTrigger = a quarter of the topic, the usual catch-up on a backlog), counted "
        "in foreachBatch; the raw loop is one Python process with the source's executor-consumer settings that "
        f"stops at the end offsets. The variants run interleaved: {len(rounds)} rounds, each running every variant "
        "once in turn, after one warm-up round. Records/s through Spark are Spark's own (`processedRowsPerSecond`: "
        "rows over the time spent in the query's micro-batches); query start-up, paid once per query, is in its own "
        "column and in the wall time. The raw loop's records/s count its whole run, consumer start included.", "",
        "| variant | records/s (median) | in micro-batches s (median) | query start-up and stop s "
        "(median) | wall s (median) | wall s, all rounds |",
        "|---|---:|---:|---:|---:|---|"]
    for name in rounds[0]:
        runs = [r[name] for r in rounds if name in r]
        med = {k: statistics.median(m[k] for m in runs) for k in ("wall_s", "trigger_s")}
        outside = (f"{statistics.median(m['outside_trigger_s'] for m in runs):.2f}"
                   if "outside_trigger_s" in runs[0] else "-")
        label = name + (" (not a competitor: a Python source that reads nothing)" if name == "floor" else "")
        walls = ", ".join(f"{m['wall_s']:.2f}" for m in runs)
        in_batches = f"{med['trigger_s']:.2f}" if "outside_trigger_s" in runs[0] else "-"
        lines.append(f"| {label} | {records / med['trigger_s']:,.0f} | "
                     f"{in_batches} | {outside} | {med['wall_s']:.2f} | "
                     f"{walls} |")
    lines += ["", "Ratios, keyedstate-kafka's over the other's (median of the per-round ratios; > 1 means "
              "keyedstate-kafka is faster). The targets use records/s through Spark; the wall rows include query "
              "start-up:", "", "| comparison | median | rounds |", "|---|---:|---|"]
    for key, r in info.get("ratios", {}).items():
        lines.append(f"| keyedstate-kafka {key} | {r['median']:.2f}x | {', '.join(f'{x:.2f}' for x in r['rounds'])} |")
    floor = ("The floor row is a Python data source with Kafka's schema that reads nothing "
             "(`bench/python_source_floor.py`, Arrow batches sliced from arrays built once): what any Python "
             "streaming source costs in Spark before it reads a record, i.e. the stream-reader process Spark "
             "starts per query (most of the start-up column) and the JVM's conversion of Arrow batches into rows.")
    if any("floor's time" in key for key in info.get("ratios", {})):
        floor += (" The ratios with the floor's time taken out compare keyedstate-kafka's time in micro-batches "
                  "minus the floor's, in as many micro-batches, with the raw loop: above 1, reading through "
                  "keyedstate-kafka costs less than the raw loop, and the rest is Spark's hand-off.")
    return lines + ["", floor, ""]


def metrics_cost(run: dict) -> dict | None:
    """The progress-metrics suite's result (bench/test_progress_metrics_bench.py), or None when it was not run."""
    bench = find_bench(run, "metrics", "test_progress_metrics_cost")
    return bench and bench.get("extra_info")


def metrics_section(run: dict) -> list[str]:
    title = ["## Metrics in the query's progress (issue 33)", ""]
    info = metrics_cost(run)
    if not info or not info.get("cpu_cost_per_round"):
        return title + ["Not measured in this run.", ""]
    if "work_cost_per_round" not in info:  # results of the suite from before it read the JIT compiler's time apart
        return title + [f"Measured by an earlier version of this suite, on the total CPU: median cost "
                        f"{info['median_cost']:+.1%} CPU, {info['median_wall_cost']:+.1%} wall.", ""]
    lines = title + [
        f"`bench/test_progress_metrics_bench.py`: count-with-timeout over {info['events']:,} events and "
        f"{info['keys']:,} keys in ONE micro-batch (Trigger.AvailableNow; the no-data batch after it fires the timers "
        "and emits one output per key), run with `progress_metrics=True` (the default) and `False`, alternating "
        f"which goes first, {info['rounds']} rounds after {info['warmup_rounds']} warm-up rounds (load "
        f"{_load({'extra_info': info})}). **CPU s** is what the run's processes spent (the driver, Spark's JVM and "
        "its Python workers, from /proc): other processes on the machine barely move it. **JIT s** is the part of it "
        "spent by the JVM's JIT compiler threads, and the target is judged on the CPU without it (**work s**): each "
        "round is a new one-batch query whose JVM is still compiling the paths it has just run, and the metrics' "
        "paths (the observation, the filter after it) are compiled once per JVM, not per batch of a running query. "
        "**Wall s** is query start to stop. Each cost is the median of the per-round differences; the target is at "
        f"most {info['target']:.0%}.", ""]
    lines += ["| round | work s on | work s off | work cost | JIT s on | JIT s off | CPU cost | wall s on | "
              "wall s off | wall cost |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for index, row in enumerate(zip(info["work_s_metrics_on"], info["work_s_metrics_off"], info["work_cost_per_round"],
                                    info["jit_s_metrics_on"], info["jit_s_metrics_off"], info["cpu_cost_per_round"],
                                    info["wall_s_metrics_on"], info["wall_s_metrics_off"],
                                    info["wall_cost_per_round"]), 1):
        work_on, work_off, work_cost, jit_on, jit_off, cpu_cost, wall_on, wall_off, wall_cost = row
        lines.append(f"| {index} | {work_on:.2f} | {work_off:.2f} | {work_cost:+.1%} | {jit_on:.2f} | {jit_off:.2f} | "
                     f"{cpu_cost:+.1%} | {wall_on:.2f} | {wall_off:.2f} | {wall_cost:+.1%} |")
    lines += ["", f"Median cost: **{info['median_cost']:+.1%} CPU without the JIT compiler** (target <= "
              f"{info['target']:.0%}); {info['median_cpu_cost']:+.1%} CPU with it, {info['median_wall_cost']:+.1%} "
              "wall.", ""]
    return lines
