"""`make bench`: run every benchmark suite once, store the raw JSON, then write bench/RESULTS.md and its plots.

    .venv/bin/python bench/run.py [--profile default|full|smoke] [--suites state,timers,...]
                                  [--results-dir bench/results] [--report-dir bench]

Issue 7 asks for every comparison to come from ONE run, so this script clears the previous run's JSON first and
the report is generated only from what this run wrote. Suites run one after the other (never in parallel: they
would compete for the two cores and distort each other). A failing suite does not stop the run: its JSON is missing
or partial and the report says so, which is more useful after a 40-minute run than nothing.

Profiles (environment variables the user already set win over the profile):
  default  ~60-70 min idle: Spark at 200k and 2M, except per_key and PyFlink at 2M (~16 min and ~85 min
           projected); the report shows those two as "not measured" with the projection. Large state (~22 min,
           projected from smoke runs, plus ~5 estimated for the checkpoint inspector at 200k and 4M keys) at 200k,
           1M and 4M keys, tws at 200k only (filling 4M keys through tws takes
           about an hour; its per-batch cost does not grow with state, so 200k stands in and the report says so).
           Latency (~16 min): Kafka to Kafka through keyed_process and the floor, at 1,000 and 10,000 events/s.
  full     the complete matrix (adds per_key and PyFlink at 2M, tws at 1M and 4M keys of large state: ~4 h).
  smoke    tiny sizes everywhere, a few minutes; checks the pipeline, the numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = REPO_ROOT / ".cache" / "bench-logs"

# name -> (file, expected minutes on an idle 2-core machine with the default profile); order = run order, cheap first
SUITES = {
    "state": ("bench/test_state_bench.py", 1.5),
    "timers": ("bench/test_timers_bench.py", 2.5),
    "harness": ("bench/test_harness_bench.py", 1.5),
    "kafka": ("bench/test_kafka_source.py", 4),
    "kafka_sink": ("bench/test_kafka_sink_bench.py", 5),
    "spark": ("bench/test_spark_bench.py", 27),
    "metrics": ("bench/test_progress_metrics_bench.py", 4),
    "large_state": ("bench/test_large_state_bench.py", 27),  # 22 + ~5 for the checkpoint inspector (estimated)
    "savepoint": ("bench/test_savepoint_bench.py", 8),
    "latency": ("bench/test_latency_bench.py", 21),
}

PROFILES = {
    "default": {
        "SPARK_BENCH_SIZES": "200k,2M",
        "SPARK_BENCH_2M_VARIANTS": "keyed_process,keyed_process_rocksdb,bucketed,tws",
        "SPARK_BENCH_FLINK_SIZES": "smoke,200k",
        "LARGE_STATE_BENCH_SIZES": "200k,1M,4M",
        "LARGE_STATE_BENCH_TWS_SIZES": "200k",
    },
    "full": {
        "SPARK_BENCH_SIZES": "200k,2M",
        "SPARK_BENCH_2M_VARIANTS": "keyed_process,keyed_process_rocksdb,bucketed,tws,per_key",
        "SPARK_BENCH_FLINK_SIZES": "smoke,200k,2M",
        "LARGE_STATE_BENCH_SIZES": "200k,1M,4M",
        "LARGE_STATE_BENCH_TWS_SIZES": "200k,1M,4M",
    },
    "smoke": {
        "SPARK_BENCH_SIZES": "smoke",
        "SPARK_BENCH_FLINK_SIZES": "smoke",
        "METRICS_BENCH_SIZE": "smoke",
        "METRICS_BENCH_ROUNDS": "1",
        "METRICS_BENCH_WARMUP": "1",
        "KEYEDSTATE_BENCH_SMOKE": "1",
        "KEYEDSTATE_KAFKA_BENCH_RECORDS": "20000",
        "KEYEDSTATE_KAFKA_SINK_BENCH_RECORDS": "20000",
        "LARGE_STATE_BENCH_SIZES": "smoke",
        "LARGE_STATE_BENCH_TWS_SIZES": "smoke",
        "LARGE_STATE_BENCH_BATCHES": "3",
        "LARGE_STATE_BENCH_ROCKSDB_BATCHES": "3",
        "SAVEPOINT_BENCH_SIZES": "smoke",
        "LATENCY_BENCH_RATES": "200,1000",
        "LATENCY_BENCH_SECONDS": "4",
        "LATENCY_BENCH_WARMUP_SECONDS": "2",
        "LATENCY_BENCH_ROUNDS": "1",
    },
}
# the knobs recorded in meta.json so the report can state exactly what ran
KNOBS = sorted({k for p in PROFILES.values() for k in p} | {"SPARK_BENCH_VARIANTS", "SPARK_BENCH_ROUNDS",
                                                             "SPARK_BENCH_2M_INTERLEAVED_ROUNDS",
                                                             "SPARK_BENCH_HEAVY", "LARGE_STATE_BENCH_VARIANTS",
                                                             "LARGE_STATE_BENCH_ROUNDS", "LARGE_STATE_BENCH_INSPECT",
                                                             "LARGE_STATE_BENCH_SNAPSHOT_SPREAD",
                                                             "LARGE_STATE_BENCH_INSPECT_SIZES", "LATENCY_BENCH_RATES",
                                                             "LATENCY_BENCH_SECONDS", "LATENCY_BENCH_ROUNDS"})


# Lines of a suite's output worth echoing as progress: test ids and outcomes (-v), the suites' own one-line results.
PROGRESS_PREFIXES = ("bench/", "PASSED", "FAILED", "SKIPPED", "ERROR", "[spark-bench]", "ratios to raw",
                     "heap timer service:", "rocksdb timer storage:", "heap timer storage:", "keyedstate-kafka",
                     "round ", "=====", "[large-state]", "[savepoint]", "latency ")


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_suite(name: str, results: Path, env: dict) -> dict:
    path, _ = SUITES[name]
    json_path = results / f"{name}.json"
    args = [sys.executable, "-m", "pytest", path, "--benchmark-only", f"--benchmark-json={json_path}", "-v", "-s",
            "-p", "no:cacheprovider"]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{name}.log"
    started = time.time()
    load_before = machine.load_average()
    # Stream the suite's output so progress is visible; keep a full log for post-mortems (not committed: Spark's
    # JVM output is large).
    with open(log_path, "w") as log, subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                                      stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        for line in proc.stdout:
            log.write(line)
            if line.lstrip().startswith(PROGRESS_PREFIXES):
                sys.stdout.write(f"    {line.strip()[:240]}\n")
                sys.stdout.flush()
        rc = proc.wait()
    seconds = time.time() - started
    _log(f"{name}: exit {rc} after {seconds / 60:.1f} min (log: {log_path.relative_to(REPO_ROOT)})")
    return {"suite": name, "command": shlex.join(["python"] + args[1:]).replace(str(REPO_ROOT) + "/", ""),
            "returncode": rc, "seconds": round(seconds, 1), "load_before": load_before,
            "load_after": machine.load_average(), "json": json_path.name if json_path.exists() else None}


FLINK_VENV = REPO_ROOT / ".cache" / "flink-venv"
FLINK_REQUIREMENT = "apache-flink==2.3.0"


def ensure_flink_venv() -> None:
    """PyFlink lives in its own venv: it pins pyarrow, protobuf, pandas and numpy versions that clash with ours.

    Created on first use so a fresh clone's ``make bench`` includes PyFlink. An existing venv is never touched
    (re-running ``venv`` over one made by another interpreter breaks it); if the install fails (no network, no wheel
    for this platform) the PyFlink benchmark fails with the reason and the report says it was not measured.
    """
    python = FLINK_VENV / "bin" / "python"
    if python.exists():
        if subprocess.run([str(python), "-c", "import pyflink"], capture_output=True, timeout=120).returncode == 0:
            return
        _log(f"{FLINK_VENV.relative_to(REPO_ROOT)} exists but cannot import pyflink; leaving it as it is "
             f"(delete it to have it re-created)")
        return
    _log(f"creating the PyFlink venv at {FLINK_VENV.relative_to(REPO_ROOT)} ({FLINK_REQUIREMENT}, a few minutes)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(FLINK_VENV)], check=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "-q", FLINK_REQUIREMENT], check=True, timeout=1800)
    except (subprocess.SubprocessError, OSError) as error:
        _log(f"PyFlink venv not created ({error}); the PyFlink benchmark will be reported as not measured")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default=os.environ.get("BENCH_PROFILE", "default"))
    parser.add_argument("--suites", default=",".join(SUITES), help="comma list of " + ",".join(SUITES))
    parser.add_argument("--results-dir", default=os.environ.get("BENCH_RESULTS_DIR", "bench/results"))
    parser.add_argument("--report-dir", default=os.environ.get("BENCH_REPORT_DIR", "bench"))
    parser.add_argument("--command", default=None, help="how the run was invoked, for the report (default: argv)")
    options = parser.parse_args(argv)
    suites = [s.strip() for s in options.suites.split(",") if s.strip()]
    unknown = set(suites) - set(SUITES)
    if unknown:
        parser.error(f"unknown suites {sorted(unknown)}")
    results = (REPO_ROOT / options.results_dir).resolve()
    results.mkdir(parents=True, exist_ok=True)
    # one run = one set of files: a stale JSON from an earlier run must never reach the report
    for stale in list(results.glob("*.json")) + list(results.glob("*.jsonl")):
        stale.unlink()

    env = dict(os.environ)
    for key, value in PROFILES[options.profile].items():
        env.setdefault(key, value)
    env["SPARK_BENCH_RESULTS"] = str(results / "spark.jsonl")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                          if p and p != str(REPO_ROOT)])
    command = options.command or shlex.join(["python", "bench/run.py"] + (argv if argv is not None else sys.argv[1:]))
    expected = sum(SUITES[s][1] for s in suites)
    _log(f"profile {options.profile}, suites {', '.join(suites)}; results -> {results}")
    if options.profile == "default":
        _log(f"expected duration on an idle 2-core machine: ~{expected:.0f} min")
    meta = {
        "command": command,
        "profile": options.profile,
        "knobs": {k: env[k] for k in KNOBS if k in env},
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_start": machine.load_average(),
        "machine": machine.machine(),
        "versions": machine.versions(),
        "commit": machine.git_commit(),
        "suites": [],
    }
    if "spark" in suites and env.get("SPARK_BENCH_FLINK", "1") != "0":
        ensure_flink_venv()
    for index, name in enumerate(suites, 1):
        _log(f"suite {index}/{len(suites)}: {name} (~{SUITES[name][1]} min with the default profile), "
             f"load {machine.load_average()[0]}")
        meta["suites"].append(run_suite(name, results, env))
        (results / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")  # partial runs stay reportable
    meta["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    meta["load_end"] = machine.load_average()
    (results / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

    import report

    written = report.write_report(results, (REPO_ROOT / options.report_dir).resolve())
    _log("wrote " + ", ".join(str(p) for p in written))
    return 0 if all(s["returncode"] in (0, 5) for s in meta["suites"]) else 1


if __name__ == "__main__":
    sys.exit(main())
