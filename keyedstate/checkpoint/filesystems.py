"""Opening a storage location as a ``pyarrow.fs`` file system, and what each kind of store needs to be told.

The one place that knows pyarrow's and the AWS SDK's quirks:

* ``s3://`` locations take credentials, region and endpoint the way the AWS tools do (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL_S3`` /
  ``AWS_ENDPOINT_URL``, instance and container roles), from query parameters of the URI
  (``s3://bucket/path?endpoint_override=host:port&scheme=http``), and from explicit ``storage options``, which win.
* The AWS SDK sends payload checksums in a form many S3-compatible stores reject (HTTP 400 on upload); checksums
  are only sent where S3 requires them (``AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_REQUIRED`` unless the environment
  says otherwise). Every file keyedstate reads is verified against its own sha256 anyway.
* Object stores have no directories: creating "directories" there only costs requests, so it is skipped.
* Which ``OSError`` is worth retrying (the store is unreachable, overloaded or failing) is read from pyarrow's
  message, which is all pyarrow exposes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional
from urllib.parse import parse_qsl, urlsplit

import pyarrow.fs as pafs

from keyedstate.errors import ConfigurationError
from keyedstate.redaction import REDACTED, is_secret, redact_uri, uri_credentials

__all__ = ["StorageOptions", "open_filesystem", "refuse_credentials", "is_transient", "has_directories",
           "DEFAULT_RETRY_SECONDS"]

DEFAULT_RETRY_SECONDS = 60.0
"""How long a storage operation is retried while the store is unreachable, before the batch fails."""

# Options passed on to pyarrow.fs.S3FileSystem as they are.
_S3_OPTIONS = frozenset({
    "access_key", "secret_key", "session_token", "region", "endpoint_override", "scheme", "role_arn",
    "session_name", "external_id", "request_timeout", "connect_timeout", "proxy_options", "force_virtual_addressing",
    "tls_ca_file_path", "anonymous", "allow_bucket_creation",
})
_SECRET_OPTIONS = frozenset({"secret_key", "session_token"})
_KEYEDSTATE_OPTIONS = frozenset({"retry_seconds", "endpoint_url"})
_S3_DEFAULTS = {"allow_delayed_open": True}  # small files go up in one PUT instead of a multipart upload

_TRANSIENT = re.compile(
    r"NETWORK_CONNECTION|SERVICE_UNAVAILABLE|SLOW_DOWN|THROTTL|INTERNAL_FAILURE|REQUEST_TIMEOUT|"
    r"HTTP status 5\d\d|curlCode: (?:6|7|28|52|55|56)\b|Connection reset|Connection refused|timed out",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class StorageOptions:
    """``state_storage_options``: ``retry_seconds`` (the retry budget, default :data:`DEFAULT_RETRY_SECONDS`),
    ``endpoint_url`` (``http://host:port`` of an S3-compatible store: sets ``endpoint_override`` and ``scheme``)
    and any ``pyarrow.fs.S3FileSystem`` argument for ``s3://`` locations (``access_key``, ``secret_key``,
    ``session_token``, ``region``, ``endpoint_override``, ``scheme``, ``connect_timeout``, ``request_timeout``, ...)."""

    retry_seconds: float = DEFAULT_RETRY_SECONDS
    s3: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Optional[Mapping[str, Any] | StorageOptions]) -> StorageOptions:
        if options is None:
            return cls()
        if isinstance(options, StorageOptions):
            return options
        if not isinstance(options, Mapping):
            raise ConfigurationError(f"state_storage_options must be a dict, got {type(options).__qualname__}")
        unknown = sorted(set(options) - _S3_OPTIONS - _KEYEDSTATE_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown state_storage_options {unknown}; known: {sorted(_S3_OPTIONS | _KEYEDSTATE_OPTIONS)}")
        retry = options.get("retry_seconds", DEFAULT_RETRY_SECONDS)
        if isinstance(retry, bool) or not isinstance(retry, (int, float)) or retry < 0:
            raise ConfigurationError(f"state_storage_options['retry_seconds'] must be a number >= 0, got {retry!r}")
        s3 = {name: value for name, value in options.items() if name in _S3_OPTIONS}
        if "endpoint_url" in options:
            s3.update(_endpoint(str(options["endpoint_url"]), "state_storage_options['endpoint_url']"))
        return cls(float(retry), s3)

    def __repr__(self) -> str:  # specs and logs show it: never the secrets
        shown = {name: (REDACTED if name in _SECRET_OPTIONS or is_secret(name, value) else value)
                 for name, value in sorted(self.s3.items())}
        fields = "".join(f", {k}={v!r}" for k, v in shown.items())
        return f"StorageOptions(retry_seconds={self.retry_seconds:g}{fields})"


def _endpoint(url: str, what: str) -> dict[str, str]:
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(f"{what} must look like http://host:port or https://host, got {url!r}")
    return {"endpoint_override": parts.netloc, "scheme": parts.scheme}


def open_filesystem(location: str, options: StorageOptions) -> tuple[pafs.FileSystem, str]:
    """The file system and the root path inside it of ``location`` (a local path or a URI)."""
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    refuse_credentials(location)
    parts = urlsplit(location)
    if parts.scheme in ("s3", "s3a"):
        return _s3(parts, options)
    filesystem, root = pafs.FileSystem.from_uri(location)
    return filesystem, root.rstrip("/")


def refuse_credentials(location: str) -> None:
    """ConfigurationError when ``location`` carries credentials: a location is shown in messages and logs and
    stored in the state files it names, so a secret in it would be written in clear text everywhere."""
    found = uri_credentials(location)
    if found:
        raise ConfigurationError(
            f"the storage URI {redact_uri(location)} carries credentials ({', '.join(found)}); a storage location is "
            f"logged, shown in errors and saved in the checkpoint's state files, so it must not hold secrets. Remove "
            f"them from the URI and pass them in state_storage_options (access_key, secret_key, session_token) or "
            f"through the AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, "
            f"or an instance or container role)")


def _s3(parts: Any, options: StorageOptions) -> tuple[pafs.FileSystem, str]:
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "WHEN_REQUIRED")
    arguments: dict[str, Any] = dict(_S3_DEFAULTS)
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        arguments.update(_endpoint(endpoint, "AWS_ENDPOINT_URL"))
    for name, value in parse_qsl(parts.query):
        if name not in _S3_OPTIONS:
            raise ConfigurationError(f"unknown query parameter {name!r} in the s3:// URI; known: {sorted(_S3_OPTIONS)}")
        arguments[name] = value
    arguments.update(options.s3)
    for name in ("request_timeout", "connect_timeout"):
        if name in arguments:
            arguments[name] = float(arguments[name])
    root = f"{parts.hostname or ''}{parts.path}".rstrip("/")
    if not parts.hostname:
        raise ConfigurationError(
            f"an s3:// location needs a bucket: s3://bucket/prefix, got {redact_uri(parts.geturl())!r}")
    return pafs.S3FileSystem(**arguments), root


def is_transient(error: BaseException) -> bool:
    """Whether retrying may help: the store was unreachable, overloaded or failing, not refusing the request."""
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    return isinstance(error, OSError) and bool(_TRANSIENT.search(str(error)))


def has_directories(filesystem: pafs.FileSystem) -> bool:
    return filesystem.type_name not in ("s3", "gcs", "abfs")
