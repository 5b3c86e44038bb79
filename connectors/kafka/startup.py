"""Startup modes (docs/kafka.md, "Startup modes"): where a NEW query starts reading. A restarted query always
resumes from its checkpoint instead; Spark never calls ``initialOffset`` then.

Runs in the driver's data-source process from ``KafkaStreamReader.initialOffset``. Precedence, as in Spark:
``startingOffsetsByTimestamp`` > ``startingTimestamp`` > ``startingOffsets``.
"""

from __future__ import annotations

import logging

from connectors.kafka.client import KafkaClient
from connectors.kafka.errors import (
    KafkaConfigurationError,
    NoCommittedOffsetError,
    NoOffsetForTimestampError,
    OffsetOutOfRangeError,
)
from connectors.kafka.offsets import TP
from connectors.kafka.source_options import KafkaOptions

__all__ = ["resolve_starting_offsets"]

log = logging.getLogger("keyedstate.connectors.kafka.startup")

EARLIEST, LATEST = -2, -1


def resolve_starting_offsets(opts: KafkaOptions, client: KafkaClient) -> dict[TP, int]:
    """Concrete next-offset-to-read per partition for the configured startup mode."""
    parts = client.topic_partitions(fail_on_unknown=True)
    tps = [(t, p) for t, ps in parts.items() for p in ps]
    if not tps:
        return {}
    low = client.list_offsets(tps, "earliest")
    high = client.list_offsets(tps, "latest")
    if opts.starting_by_timestamp is not None or opts.starting_timestamp is not None:
        return _by_timestamp(opts, client, tps, high)
    mode = opts.starting
    if mode == "earliest":
        return low
    if mode == "latest":
        return high
    if mode == "group":
        assert opts.group_id is not None
        committed = client.committed(opts.group_id, tps)
        out: dict[TP, int] = {}
        for tp in tps:
            if tp not in committed:
                if opts.group_offset_reset == "none":
                    raise NoCommittedOffsetError(
                        f"group {opts.group_id!r} has no committed offset for {tp[0]}[{tp[1]}] on brokers "
                        f"{opts.bootstrap_servers}; set option groupOffsetReset=earliest|latest or commit offsets")
                out[tp] = low[tp] if opts.group_offset_reset == "earliest" else high[tp]
                log.info("group %r has no committed offset for %s[%d]; starting at %s (%d)", opts.group_id, tp[0],
                         tp[1], opts.group_offset_reset, out[tp])
                continue
            out[tp] = _check_range(opts, tp, committed[tp], low[tp], high[tp],
                                   f"committed offset of group {opts.group_id!r}")
        return out
    assert isinstance(mode, dict)
    wanted = {(t, p): o for t, ps in mode.items() for p, o in ps.items()}
    missing = sorted(set(tps) - set(wanted))
    if missing:
        raise KafkaConfigurationError(
            "option startingOffsets must give an offset (or -2 earliest / -1 latest) for every partition; missing "
            + ", ".join(f"{t}[{p}]" for t, p in missing))
    unknown = sorted(set(wanted) - set(tps))
    if unknown:
        raise KafkaConfigurationError(
            "option startingOffsets names partitions that do not exist on brokers "
            f"{opts.bootstrap_servers}: " + ", ".join(f"{t}[{p}]" for t, p in unknown))
    out = {}
    for tp in tps:
        o = wanted[tp]
        out[tp] = low[tp] if o == EARLIEST else high[tp] if o == LATEST else _check_range(
            opts, tp, o, low[tp], high[tp], "option startingOffsets")
    return out


def _check_range(opts: KafkaOptions, tp: TP, offset: int, low: int, high: int, what: str) -> int:
    if low <= offset <= high:
        return offset
    msg = (f"{what} {offset} for {tp[0]}[{tp[1]}] is out of range: brokers {opts.bootstrap_servers} have offsets "
           f"{low}..{high}")
    if opts.fail_on_data_loss:
        raise OffsetOutOfRangeError(msg + "; fix option startingOffsets, or set failOnDataLoss=false to clamp it "
                                          "into the available range")
    clamped = low if offset < low else high
    log.warning("%s; failOnDataLoss=false, starting at %d", msg, clamped)
    return clamped


def _by_timestamp(opts: KafkaOptions, client: KafkaClient, tps: list[TP], high: dict[TP, int]) -> dict[TP, int]:
    if opts.starting_by_timestamp is not None:
        wanted = {(t, p): ts for t, ps in opts.starting_by_timestamp.items() for p, ts in ps.items()}
        missing = sorted(set(tps) - set(wanted))
        if missing:
            raise KafkaConfigurationError(
                "option startingOffsetsByTimestamp must give a timestamp for every partition; missing "
                + ", ".join(f"{t}[{p}]" for t, p in missing))
    else:
        assert opts.starting_timestamp is not None
        wanted = {tp: opts.starting_timestamp for tp in tps}
    out: dict[TP, int] = {}
    by_ts: dict[int, list[TP]] = {}
    for tp in tps:
        by_ts.setdefault(wanted[tp], []).append(tp)
    for ts, group in by_ts.items():
        for tp, off in client.list_offsets(group, ts).items():
            if off < 0:
                if opts.timestamp_strategy == "error":
                    raise NoOffsetForTimestampError(
                        f"no record with timestamp >= {ts} in {tp[0]}[{tp[1]}] on brokers {opts.bootstrap_servers}; "
                        "set startingOffsetsByTimestampStrategy=latest to start at the end instead")
                off = high[tp]
            out[tp] = off
    return out
