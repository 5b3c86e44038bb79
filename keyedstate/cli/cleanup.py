"""``python -m keyedstate cleanup CHECKPOINT``: :func:`keyedstate.cleanup.clean_up_query` on the command line.

Unlike the function, the command removes unless ``--dry-run`` is given (as ``rm`` does); its safety checks still
refuse while the query may run or its checkpoint needs the state, unless ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from keyedstate.cli import EXIT_FAILED, EXIT_OK, EXIT_REFUSED
from keyedstate.cli.options import flag_and_file_options
from keyedstate.errors import CleanupRefusedError, KeyedStateError

__all__ = ["register", "run"]

COMMAND = "cleanup"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cleanup", help="remove what a stopped query left behind (state storage, Kafka sink progress groups)",
        description="Remove a stopped streaming query's RocksDB-mode state storage (<state storage>/<query id>/) and "
                    "local databases, and its exactly-once Kafka sink's progress-marker consumer groups; the query "
                    "id comes from the checkpoint. Refuses while the query may be running or while the checkpoint "
                    "still holds state naming the storage, unless --force.")
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="the query's checkpointLocation (path or URI)")
    parser.add_argument("--state-storage", metavar="URI",
                        help="keyed_process's state_storage (default: ~/.keyedstate/state-storage or "
                             "$KEYEDSTATE_STATE_STORAGE)")
    parser.add_argument("--state-storage-option", metavar="KEY=VALUE", action="append", default=[],
                        help="a state_storage_options entry (endpoint_url, region, retry_seconds, ...); repeatable. "
                             "No secrets here")
    parser.add_argument("--state-storage-options-file", metavar="FILE",
                        help="state_storage_options from a file (a JSON object or KEY=VALUE lines): the place for "
                             "access_key/secret_key, unless the AWS_* environment holds them")
    parser.add_argument("--state-local-dir", metavar="PATH",
                        help="keyed_process's state_local_dir on this machine (default: the default local dir)")
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                        help="the Kafka cluster the exactly-once sink wrote to (without it, groups are not looked for)")
    parser.add_argument("--kafka-option", metavar="KEY=VALUE", action="append", default=[],
                        help="a librdkafka property for the admin client (security.protocol, sasl.mechanism, ...); "
                             "repeatable. No secrets here")
    parser.add_argument("--kafka-options-file", metavar="FILE",
                        help="librdkafka properties from a file (a JSON object or KEY=VALUE lines): the place for "
                             "sasl.password and other secrets")
    parser.add_argument("--transactional-id-prefix", metavar="PREFIX",
                        help="only the groups of the sink with this transactionalIdPrefix")
    parser.add_argument("--checkpoint-option", metavar="KEY=VALUE", action="append", default=[],
                        help="a storage option of an s3:// checkpoint location, like --state-storage-option")
    parser.add_argument("--checkpoint-options-file", metavar="FILE", help="those options from a file")
    parser.add_argument("--delete-checkpoint", action="store_true",
                        help="remove the checkpoint too, last (then it no longer blocks the clean-up)")
    parser.add_argument("--idle-seconds", metavar="SECONDS", type=float, default=None,
                        help="treat the query as stopped when no batch started or committed for this long "
                             "(default 600)")
    parser.add_argument("--dry-run", action="store_true", help="only list what would be removed, with sizes")
    parser.add_argument("--force", action="store_true",
                        help="remove even though the query may be running or its checkpoint still needs the state")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from keyedstate.cleanup import DEFAULT_IDLE_SECONDS, clean_up_query

    state_storage_options = flag_and_file_options(args.state_storage_option, args.state_storage_options_file,
                                                  "--state-storage-option", "--state-storage-options-file", COMMAND)
    kafka_options = flag_and_file_options(args.kafka_option, args.kafka_options_file, "--kafka-option",
                                          "--kafka-options-file", COMMAND, storage=False)
    checkpoint_options = flag_and_file_options(args.checkpoint_option, args.checkpoint_options_file,
                                               "--checkpoint-option", "--checkpoint-options-file", COMMAND)
    try:
        report = clean_up_query(
            args.checkpoint, state_storage=args.state_storage, state_storage_options=state_storage_options or None,
            state_local_dir=args.state_local_dir, bootstrap_servers=args.bootstrap_servers,
            kafka_options=kafka_options or None, transactional_id_prefix=args.transactional_id_prefix,
            checkpoint_options=checkpoint_options or None,
            delete_checkpoint=args.delete_checkpoint,
            idle_seconds=DEFAULT_IDLE_SECONDS if args.idle_seconds is None else args.idle_seconds,
            dry_run=args.dry_run, force=args.force)
    except CleanupRefusedError as error:
        print(f"keyedstate cleanup: refused: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyedStateError as error:
        print(f"keyedstate cleanup: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(report.describe())
    return EXIT_OK

