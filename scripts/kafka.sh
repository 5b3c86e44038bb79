#!/usr/bin/env bash
# Local Apache Kafka (KRaft) for keyedstate's tests, bench and demo. Nothing here is committed: jars and broker
# data live in the git-ignored .cache/kafka/.
#
#   bash scripts/kafka.sh fetch          download kafka_2.13 + runtime deps (idempotent; fast when present)
#   bash scripts/kafka.sh fetch-spark    also pre-fetch spark-sql-kafka-0-10 into .cache/kafka/spark-jars (the bench;
#                                        SPARK_KAFKA_VERSION and SPARK_KAFKA_JARS_DIR: another Spark line's connector)
#   bash scripts/kafka.sh start [N]      start an N-node (default 1) KRaft cluster on 127.0.0.1, print bootstrap
#   bash scripts/kafka.sh stop           stop the cluster started by `start`
#   bash scripts/kafka.sh status         print the bootstrap address if running
#
# Environment: KAFKA_VERSION (default 4.1.1), KAFKA_PORT (first broker port for `start`, default 9092 when free).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
CACHE="$ROOT/.cache/kafka"
LIB="$CACHE/lib"
MARKER="$LIB/.complete-$KAFKA_VERSION-2"
PY="${KAFKA_SCRIPT_PYTHON:-python3}"

fetch() {
  if [[ -f "$MARKER" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || { echo "kafka.sh: Maven (mvn) is required to fetch Kafka jars" >&2; exit 1; }
  mkdir -p "$CACHE/pom"
  cat > "$CACHE/pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>keyedstate.local</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>
  </dependencies>
</project>
POM
  rm -rf "$LIB.tmp"
  echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION jars from Maven Central into $LIB" >&2
  mvn -q -B -f "$CACHE/pom/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$LIB.tmp" >&2
  rm -rf "$LIB"
  mv "$LIB.tmp" "$LIB"
  touch "$MARKER"
}

fetch_spark() {
  # The bench compares against Spark's built-in Kafka source; pre-fetch it (and its deps) so the bench runs from cache.
  # spark-sql-kafka-0-10 matching the installed pyspark, or (when Maven Central does not have that release, as for
  # pyspark 4.3.0) the newest 4.x connector that exists: SPARK_KAFKA_FALLBACK_VERSION (default 4.2.0).
  local spark_version
  spark_version="${SPARK_KAFKA_VERSION:-$("$ROOT/.venv/bin/python" -c 'import pyspark; print(pyspark.__version__)')}"
  local dir="${SPARK_KAFKA_JARS_DIR:-$CACHE/spark-jars}"
  if compgen -G "$dir/.complete-*" >/dev/null; then
    return 0
  fi
  local base="https://repo1.maven.org/maven2/org/apache/spark/spark-sql-kafka-0-10_2.13"
  if ! curl -sfI "$base/$spark_version/spark-sql-kafka-0-10_2.13-$spark_version.pom" >/dev/null; then
    echo "kafka.sh: spark-sql-kafka-0-10_2.13:$spark_version is not on Maven Central; using" \
         "${SPARK_KAFKA_FALLBACK_VERSION:-4.2.0}" >&2
    spark_version="${SPARK_KAFKA_FALLBACK_VERSION:-4.2.0}"
  fi
  # Its spark-token-provider-kafka-0-10 dependency is missing from Maven Central for several 4.x releases; use the
  # same version when it exists, else 4.0.0 (the class the source needs, KafkaConfigUpdater, is unchanged).
  local token_version="$spark_version"
  local tbase="https://repo1.maven.org/maven2/org/apache/spark/spark-token-provider-kafka-0-10_2.13"
  if ! curl -sfI "$tbase/$token_version/spark-token-provider-kafka-0-10_2.13-$token_version.jar" >/dev/null; then
    token_version="${SPARK_TOKEN_PROVIDER_FALLBACK_VERSION:-4.0.0}"
    echo "kafka.sh: using spark-token-provider-kafka-0-10_2.13:$token_version" >&2
  fi
  mkdir -p "$CACHE/spark-pom"
  cat > "$CACHE/spark-pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>keyedstate.local</groupId>
  <artifactId>spark-kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>$spark_version</version>
      <exclusions><exclusion><groupId>org.apache.spark</groupId><artifactId>spark-tags_2.13</artifactId></exclusion>
      <exclusion><groupId>org.apache.spark</groupId><artifactId>spark-token-provider-kafka-0-10_2.13</artifactId></exclusion>
      <exclusion><groupId>org.slf4j</groupId><artifactId>*</artifactId></exclusion>
      <exclusion><groupId>org.apache.hadoop</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-token-provider-kafka-0-10_2.13</artifactId><version>$token_version</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
  </dependencies>
</project>
POM
  # Spark's parent POM names a Google mirror of Maven Central; send every repository to Maven Central itself.
  cat > "$CACHE/spark-pom/settings.xml" <<SETTINGS
<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>
<url>https://repo1.maven.org/maven2</url></mirror></mirrors></settings>
SETTINGS
  rm -rf "$dir.tmp"
  echo "kafka.sh: fetching spark-sql-kafka-0-10_2.13:$spark_version into $dir" >&2
  mvn -q -B -s "$CACHE/spark-pom/settings.xml" -f "$CACHE/spark-pom/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$dir.tmp" >&2
  # pyspark already ships these (newer or equal versions); keep only what it lacks.
  rm -f "$dir.tmp"/scala-library-*.jar "$dir.tmp"/scala-parallel-collections_*.jar "$dir.tmp"/lz4-java-*.jar \
        "$dir.tmp"/snappy-java-*.jar "$dir.tmp"/jsr305-*.jar
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  touch "$dir/.complete-$spark_version"
}

case "${1:-}" in
  fetch) fetch ;;
  fetch-spark) fetch_spark ;;
  start)
    fetch
    exec "$PY" "$ROOT/scripts/kafka/cluster.py" start --lib "$LIB" --state "$CACHE/run" --nodes "${2:-1}" \
      --port "${KAFKA_PORT:-9092}"
    ;;
  stop) exec "$PY" "$ROOT/scripts/kafka/cluster.py" stop --state "$CACHE/run" ;;
  status) exec "$PY" "$ROOT/scripts/kafka/cluster.py" status --state "$CACHE/run" ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
