"""Paths below a storage location, which may be a URI with a query string (``s3://bucket/prefix?scheme=http``).

Segments go into the URI's path, before its query string: appended after it they would become part of the last
query parameter's value. Every place that derives a location from another goes through here.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["join_location", "last_segment"]


def join_location(location: str, *segments: str) -> str:
    """``location`` with ``segments`` appended to its path (``join_location("s3://b/p?x=1", "q", "u")`` is
    ``"s3://b/p/q/u?x=1"``)."""
    tail = "/".join(segment.strip("/") for segment in segments)
    if "://" not in location:
        return f"{location.rstrip('/')}/{tail}"
    parts = urlsplit(location)
    return urlunsplit((parts.scheme, parts.netloc, f"{parts.path.rstrip('/')}/{tail}", parts.query, parts.fragment))


def last_segment(location: str) -> str:
    """The last segment of ``location``'s path (its query string ignored)."""
    path = urlsplit(location).path if "://" in location else location
    return path.rstrip("/").rsplit("/", 1)[-1]
