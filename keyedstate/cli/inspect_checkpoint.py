"""``python -m keyedstate inspect CHECKPOINT``: :func:`keyedstate.spark.inspect_keyed_state` on the command line.

It needs a Spark session: the one already active in the process, else a new one (``local[*]`` unless ``--master``,
``--remote`` or ``SPARK_REMOTE`` say otherwise) with ``--conf`` and ``--properties-file`` settings. Secrets belong in
files (``--properties-file``, ``--state-storage-options-file``) or the AWS environment, never in flags: a command
line ends up in the shell's history and the process list, and the command warns when a flag holds one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from keyedstate.cli import EXIT_FAILED, EXIT_OK
from keyedstate.cli.options import flag_and_file_options, key_value_pairs, properties_file, warn_about_secrets
from keyedstate.errors import KeyedStateError, unwrap

__all__ = ["register", "run"]

COMMAND = "inspect"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        COMMAND, help="print a committed batch's keyed state: keys, key groups, state bytes, timers, storage",
        description="Print what a committed batch of a keyed_process checkpoint holds, for either state backend: "
                    "key groups, keys, state bytes per state name, pending timers (next due time, a histogram by "
                    "due time), the largest keys, and the bytes in Spark's state rows and RocksDB mode's bases and "
                    "changelogs. Aggregated in Spark: the driver collects only aggregates.")
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="the query's checkpointLocation (path or URI)")
    parser.add_argument("--batch", metavar="N", type=int, help="the batch to inspect (default: the last committed)")
    parser.add_argument("--operator-id", metavar="N", type=int, default=0,
                        help="Spark's operator id of keyed_process in the query (default 0)")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the state and timer distributions (matplotlib)")
    parser.add_argument("--json", action="store_true", help="print the inspection as JSON instead of text")
    parser.add_argument("--top", metavar="N", type=int, default=10, help="how many largest keys to list (default 10)")
    parser.add_argument("--bins", metavar="N", type=int, default=20,
                        help="bins of the timer histogram by due time (default 20)")
    storage = parser.add_argument_group("state storage (RocksDB mode) and an S3 checkpoint")
    storage.add_argument("--state-storage", metavar="URI",
                         help="where the state files are now, when they were moved (default: where the query wrote "
                              "them, as its rows name it)")
    storage.add_argument("--state-storage-option", metavar="KEY=VALUE", action="append", default=[],
                         help="a state_storage_options entry (endpoint_url, region, ...); repeatable. No secrets here")
    storage.add_argument("--state-storage-options-file", metavar="FILE",
                         help="state_storage_options from a file (a JSON object or KEY=VALUE lines): the place for "
                              "access_key/secret_key, unless the AWS_* environment holds them")
    storage.add_argument("--checkpoint-option", metavar="KEY=VALUE", action="append", default=[],
                         help="a storage option for reading an s3:// checkpoint's logs from this process, like "
                              "--state-storage-option")
    storage.add_argument("--checkpoint-options-file", metavar="FILE", help="those options from a file")
    spark = parser.add_argument_group("the Spark session (when the process has none)")
    spark.add_argument("--master", metavar="URL", help="Spark master (default: local[*], or $SPARK_REMOTE)")
    spark.add_argument("--remote", metavar="URL", help="a Spark Connect server (sc://host:port)")
    spark.add_argument("--conf", metavar="KEY=VALUE", action="append", default=[],
                       help="a Spark setting (spark.hadoop.fs.s3a.endpoint=...); repeatable. No secrets here")
    spark.add_argument("--properties-file", metavar="FILE",
                       help="Spark settings as in spark-defaults.conf ('key value' lines): the place for "
                            "spark.hadoop.fs.s3a.secret.key and other secrets")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from keyedstate.spark import inspect_keyed_state, plot_inspection
    from keyedstate.spark.inspection_plot import require_matplotlib

    storage_options = flag_and_file_options(args.state_storage_option, args.state_storage_options_file,
                                            "--state-storage-option", "--state-storage-options-file", COMMAND)
    checkpoint_options = flag_and_file_options(args.checkpoint_option, args.checkpoint_options_file,
                                               "--checkpoint-option", "--checkpoint-options-file", COMMAND)
    conf = key_value_pairs(args.conf, "--conf", COMMAND)
    warn_about_secrets(conf, "--conf", COMMAND, "put it in --properties-file, or use the AWS_* environment")
    conf.update(properties_file(args.properties_file, "--properties-file", COMMAND))
    if args.plot:
        try:
            require_matplotlib()
        except KeyedStateError as error:
            print(f"keyedstate {COMMAND}: {type(error).__name__}: {error}", file=sys.stderr)
            return EXIT_FAILED
    spark, ours = _spark_session(args, conf)
    try:
        inspection = inspect_keyed_state(
            spark, args.checkpoint, batch_id=args.batch, operator_id=args.operator_id, state_storage=args.state_storage,
            state_storage_options=storage_options or None, checkpoint_options=checkpoint_options or None,
            top_keys=args.top, histogram_bins=args.bins)
        if args.plot:
            plot_inspection(inspection, args.plot)
    except Exception as error:  # Spark's own exceptions carry ours (raised in its workers) in their text
        ours_error = unwrap(error)
        if ours_error is None:
            raise
        print(f"keyedstate {COMMAND}: {type(ours_error).__name__}: {ours_error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if ours:
            spark.stop()
    print(json.dumps(inspection.to_dict(), indent=2) if args.json else inspection.describe(top=args.top))
    if args.plot:
        print(f"plot written to {args.plot}", file=sys.stderr)
    return EXIT_OK



def _spark_session(args: argparse.Namespace, conf: dict[str, str]) -> tuple[Any, bool]:
    """The process's active session when nothing asks for another, else a new one; and whether it is ours to stop."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and not (args.master or args.remote or conf):
        return active, False
    builder = SparkSession.builder.appName("keyedstate-inspect")
    if args.remote:
        builder = builder.remote(args.remote)
    elif args.master:
        builder = builder.master(args.master)
    # Spark's console progress bar would mix with the report on a terminal (a Connect client has none)
    quiet = {} if args.remote or os.environ.get("SPARK_REMOTE") else {"spark.ui.showConsoleProgress": "false"}
    for key, value in {**quiet, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    return session, active is None
