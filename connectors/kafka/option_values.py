"""The option checks the keyedstate-kafka source and sink share: typed values, the ``kafka.*`` split, and refusing
Java client syntax librdkafka cannot read."""

from __future__ import annotations

from typing import Mapping

from connectors.kafka.errors import KafkaConfigurationError
from keyedstate.redaction import REDACTED

__all__ = ["bool_option", "int_option", "reject_jaas_config", "retry_options", "split_options"]


def bool_option(name: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise KafkaConfigurationError(f"option {name}={raw!r} is not a boolean; use true or false")


def int_option(name: str, raw: str, minimum: int) -> int:
    try:
        v = int(raw)
    except ValueError:
        raise KafkaConfigurationError(f"option {name}={raw!r} is not an integer") from None
    if v < minimum:
        raise KafkaConfigurationError(f"option {name}={v} must be >= {minimum}")
    return v


def retry_options(opts: Mapping[str, str]) -> dict[str, int]:
    """The source's and the sink's ``brokerRetryTimeoutMs``, ``retryBackoffMs`` and ``requestTimeoutMs``, as keyword
    arguments of their options classes."""
    return {
        "broker_retry_timeout_ms": int_option("brokerRetryTimeoutMs", opts.get("brokerretrytimeoutms", "120000"), 0),
        "retry_backoff_ms": int_option("retryBackoffMs", opts.get("retrybackoffms", "500"), 1),
        "request_timeout_ms": int_option("requestTimeoutMs", opts.get("requesttimeoutms", "10000"), 100),
    }


#: Java ``LoginModule`` class names in ``sasl.jaas.config`` -> the ``sasl.mechanism`` librdkafka needs instead.
_JAAS_MECHANISMS = (("PlainLoginModule", "PLAIN"), ("ScramLoginModule", "SCRAM-SHA-256 or SCRAM-SHA-512"),
                    ("OAuthBearerLoginModule", "OAUTHBEARER"), ("Krb5LoginModule", "GSSAPI"))


def reject_jaas_config(kafka: Mapping[str, str]) -> None:
    """Refuse ``kafka.sasl.jaas.config`` before any client exists: librdkafka only fails on it when the first client
    is created, inside a Spark task, with a bare ``_INVALID_ARG``. The value usually holds a password, so the
    message shows the login module at most, never the value."""
    jaas = kafka.get("sasl.jaas.config")
    if jaas is None:
        return
    mechanism = next((m for module, m in _JAAS_MECHANISMS if module in jaas), None)
    hint = (f"kafka.sasl.mechanism={mechanism}" if mechanism else
            "kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or GSSAPI)")
    raise KafkaConfigurationError(
        f"option kafka.sasl.jaas.config={REDACTED!r} is Java client syntax, which librdkafka (the Kafka client of "
        f"keyedstate-kafka) does not support. Remove it and set {hint}, kafka.sasl.username and "
        "kafka.sasl.password instead, with kafka.security.protocol=SASL_SSL (or SASL_PLAINTEXT)"
        + ("; for OAUTHBEARER see librdkafka's sasl.oauthbearer.* properties" if mechanism == "OAUTHBEARER" else ""))


def split_options(options: Mapping[str, str], known: set[str], forbidden: set[str], component: str,
                  example_property: str, forbidden_reason: str) -> tuple[dict[str, str], dict[str, str], str]:
    """The checks the source and the sink share: ``(options with lower-case names, the kafka.* properties without
    the prefix and without bootstrap.servers, the bootstrap servers)``; an unknown option, a forbidden property, a Java
    ``sasl.jaas.config`` or missing bootstrap servers raise :class:`KafkaConfigurationError` naming it."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    kafka = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    unknown = sorted(k for k in opts if k not in known and not k.startswith("kafka."))
    if unknown:
        raise KafkaConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for the keyedstate-kafka {component}; librdkafka properties must "
            f"be prefixed with 'kafka.' (e.g. kafka.{example_property})")
    reject_jaas_config(kafka)
    bad = sorted(forbidden & set(kafka))
    if bad:
        raise KafkaConfigurationError(
            f"option(s) {', '.join('kafka.' + b for b in bad)} cannot be set: {forbidden_reason}")
    servers = kafka.pop("bootstrap.servers", "").strip()
    if not servers:
        raise KafkaConfigurationError("option kafka.bootstrap.servers is required (e.g. 'host1:9092,host2:9092')")
    return opts, kafka, servers
