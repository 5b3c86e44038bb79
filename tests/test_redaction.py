"""Hiding secrets the way Spark does (``spark.redaction.regex``), in options, message texts and URIs."""

from __future__ import annotations

import pytest

from keyedstate.redaction import (
    REDACTED,
    is_secret,
    redact_options,
    redact_text,
    redact_uri,
    secret_values,
    uri_credentials,
    without_credentials,
)


@pytest.mark.parametrize("name", ["kafka.ssl.key.password", "sasl.password", "secret_key", "session_token",
                                  "spark.hadoop.fs.s3a.access.key", "fs.s3a.accesskey",
                                  "SASL.OAUTHBEARER.CLIENT.SECRET", "kafka.sasl.jaas.config", "ssl.key.pem"])
def test_names_matching_sparks_regex_or_known_to_hold_secrets_are_secret(name):
    assert is_secret(name, "harmless")
    assert redact_options({name: "hunter2"}) == {name: REDACTED}


def test_a_value_that_looks_like_a_secret_is_secret_whatever_its_name():
    # Spark's Utils.redact matches values too: a JAAS line under any name carries password="..."
    options = {"kafka.some.config": 'PlainLoginModule required username="u" password="hunter2";', "acks": "all"}
    assert redact_options(options) == {"kafka.some.config": REDACTED, "acks": "all"}


def test_redact_text_replaces_every_occurrence_and_the_repr_of_each_secret():
    options = {"sasl.password": "hunter2", "jaas": "a 'quoted\" password", "acks": "all"}
    text = f"x=hunter2 y={options['jaas']!r} z=hunter2 all"
    redacted = redact_text(text, secret_values(options))
    assert "hunter2" not in redacted and "quoted" not in redacted
    assert redacted.count(REDACTED) == 3 and redacted.endswith(" all")


def test_uris_lose_user_information_and_secret_query_parameters():
    uri = "s3://AKIAKEY:hunter2@bucket/prefix?secret_key=hunter3&scheme=http"
    assert redact_uri(uri) == f"s3://{REDACTED}@bucket/prefix?secret_key={REDACTED}&scheme=http"
    assert uri_credentials(uri) == ["user information (user:password@)", "secret_key"]
    plain = "s3://bucket/p?endpoint_override=token-store.internal:9000&scheme=http"  # by name only
    assert redact_uri(plain) == plain and uri_credentials(plain) == []
    assert redact_uri("/local/path@with/at") == "/local/path@with/at"


def test_without_credentials_leaves_the_location_they_were_attached_to():
    # what a checkpoint written before such URIs were refused saved: the same place, minus the secrets
    stored = "s3://AKIA:hunter2@bucket/p/q/u?secret_key=x&scheme=http"
    assert without_credentials(stored) == "s3://bucket/p/q/u?scheme=http"
    assert without_credentials("s3://bucket/p?scheme=http") == "s3://bucket/p?scheme=http"
    assert without_credentials("/local/p") == "/local/p"


def test_a_user_name_alone_is_a_credential_only_where_it_is_an_access_key_id():
    from keyedstate.redaction import uri_credentials

    assert uri_credentials("hdfs://etl@namenode:8020/state") == []
    assert uri_credentials("hdfs://etl:pw@namenode:8020/state") == ["user information (user:password@)"]
    assert uri_credentials("s3://AKIAEXAMPLE@bucket/state") == ["user information (user:password@)"]
