"""Hiding secrets in what keyedstate writes: error messages, log lines and stored files.

It follows Spark's convention (``spark.redaction.regex``, ``Utils.redact``) so that one rule covers Spark's and our
output: an option whose name or value matches :data:`SECRET_PATTERN` has its value replaced by :data:`REDACTED`.
A value can name no secret and still hold one (``sasl.jaas.config``'s ``password="..."`` matches by its value; a PEM
private key matches nothing), so a few properties are always redacted. URIs lose their user information
(``user:password@``) and the query parameters whose names look secret (by name only: a host name in
``endpoint_override`` may contain "token").
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["SECRET_PATTERN", "REDACTED", "is_secret", "redact_options", "secret_values", "redact_text",
           "redact_uri", "uri_credentials", "without_credentials"]

SECRET_PATTERN = re.compile(r"(?i)secret|password|token|access[.]?key")
"""Spark's default ``spark.redaction.regex``."""

REDACTED = "*********(redacted)"
"""Spark's replacement text, so redacted values look the same in Spark's logs and ours."""

# librdkafka properties that hold secrets under names the pattern misses.
_ALWAYS_SECRET = frozenset({"sasl.jaas.config", "ssl.key.pem", "sasl.oauthbearer.config"})


def _property(name: str) -> str:
    """The librdkafka property of an option: option names as users write them reach librdkafka without ``kafka.``."""
    lowered = name.lower()
    return lowered[len("kafka."):] if lowered.startswith("kafka.") else lowered


def is_secret(name: str, value: Any = None) -> bool:
    """Whether the option ``name`` (with or without its ``kafka.`` prefix) set to ``value`` must not be shown."""
    if _property(str(name)) in _ALWAYS_SECRET or SECRET_PATTERN.search(str(name)):
        return True
    return isinstance(value, str) and bool(SECRET_PATTERN.search(value))


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every secret value replaced by :data:`REDACTED`."""
    return {name: (REDACTED if is_secret(name, value) else value) for name, value in options.items()}


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The values of ``options`` that must not be shown, longest first (so no part of one survives another)."""
    values = {str(value) for name, value in options.items() if is_secret(name, value) and str(value)}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` (and of its ``repr``, which escapes quotes) replaced."""
    for secret in secrets:
        if not secret:
            continue
        for form in (repr(secret), secret):
            text = text.replace(form, repr(REDACTED) if form != secret else REDACTED)
    return text


_KEY_ID_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs"})


def uri_credentials(uri: str) -> list[str]:
    """What in ``uri`` is a credential: its user information and secret-looking query parameters (their names)."""
    if "://" not in uri:
        return []
    parts = urlsplit(uri)
    # A user name alone is no secret (hdfs://user@namenode), except where it is an object store's access key id.
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else None
    secret_user = userinfo is not None and (":" in userinfo or parts.scheme.lower() in _KEY_ID_SCHEMES)
    found = ["user information (user:password@)"] if secret_user else []
    found += [name for name, _ in parse_qsl(parts.query, keep_blank_values=True) if is_secret(name)]
    return found


def redact_uri(uri: str) -> str:
    """``uri`` with its user information and secret-looking query parameters redacted; a local path as is."""
    return _replace_credentials(str(uri), REDACTED)


def without_credentials(uri: str) -> str:
    """``uri`` without its user information and secret-looking query parameters: the location it names (a
    checkpoint written before such URIs were refused saved them in its state files)."""
    return _replace_credentials(str(uri), None)


def _replace_credentials(uri: str, replacement: Optional[str]) -> str:
    if "://" not in uri:
        return uri
    try:
        parts = urlsplit(uri)
    except ValueError:  # not a URI after all (an unbalanced '[' in the host): show nothing of it that may be secret
        return REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        host = netloc.rsplit("@", 1)[1]
        netloc = host if replacement is None else f"{replacement}@{host}"
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(is_secret(name) for name, _ in pairs):
        kept = [(name, replacement if is_secret(name) else value) for name, value in pairs]
        query = urlencode([(name, value) for name, value in kept if value is not None], safe="*()/:")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
