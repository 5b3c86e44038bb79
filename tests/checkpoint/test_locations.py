"""Segments joined onto a storage location go into its path, before a query string."""

from __future__ import annotations

from keyedstate.checkpoint.locations import join_location, last_segment


def test_segments_go_before_the_query_string():
    uri = "s3://bucket/prefix/?endpoint_override=127.0.0.1:9000&scheme=http"
    joined = join_location(uri, "query-id", "uid")
    assert joined == "s3://bucket/prefix/query-id/uid?endpoint_override=127.0.0.1:9000&scheme=http"
    assert last_segment(joined) == "uid"


def test_plain_uris_and_local_paths_get_one_slash_between_segments():
    assert join_location("s3://bucket", "q", "u") == "s3://bucket/q/u"
    assert join_location("hdfs://nn:8020/state/", "q") == "hdfs://nn:8020/state/q"
    assert join_location("/tmp/state/", "q", "u") == "/tmp/state/q/u"
    assert last_segment("/tmp/state/q/u/") == "u"
