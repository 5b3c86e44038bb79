#!/usr/bin/env bash
# S3Proxy (an S3-compatible server, filesystem backend) for keyedstate's tests and bench. Nothing here is committed:
# the jar lives in the git-ignored .cache/s3proxy/.
#
#   bash scripts/s3proxy.sh fetch     download the S3Proxy jar from Maven Central, checked against its sha1 (idempotent)
#
# The tests start and stop servers themselves (scripts/s3proxy_server.py, through tests/conftest.py). Environment: S3PROXY_VERSION (default 2.9.0).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
S3PROXY_VERSION="${S3PROXY_VERSION:-2.9.0}"
CACHE="$ROOT/.cache/s3proxy"
JAR="$CACHE/s3proxy-$S3PROXY_VERSION-jar-with-dependencies.jar"
URL="https://repo1.maven.org/maven2/org/gaul/s3proxy/$S3PROXY_VERSION/s3proxy-$S3PROXY_VERSION-jar-with-dependencies.jar"

fetch() {
  if [[ -f "$JAR" ]]; then
    return 0
  fi
  mkdir -p "$CACHE"
  echo "s3proxy.sh: fetching S3Proxy $S3PROXY_VERSION from Maven Central into $CACHE" >&2
  curl -fsSL -o "$JAR.tmp" "$URL"
  expected="$(curl -fsSL "$URL.sha1" | cut -c1-40)"
  actual="$(sha1sum "$JAR.tmp" | cut -c1-40)"
  if [[ "$expected" != "$actual" ]]; then
    rm -f "$JAR.tmp"
    echo "s3proxy.sh: sha1 mismatch for $URL (expected $expected, got $actual)" >&2
    exit 1
  fi
  mv "$JAR.tmp" "$JAR"
}

case "${1:-}" in
  fetch) fetch ;;
  jar) fetch; echo "$JAR" ;;
  *) echo "usage: $0 fetch|jar" >&2; exit 2 ;;
esac
