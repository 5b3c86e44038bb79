"""Start and stop local Apache Kafka 4.x KRaft clusters on 127.0.0.1 (standard library only).

Used by ``scripts/kafka.sh start|stop|status`` (detached processes, state in a JSON file) and imported by the test
fixtures in ``tests/connectors/conftest.py`` (processes tied to the test session, killed at exit even on failure).

Every node runs in combined mode (``process.roles=broker,controller``); an N-node cluster is an N-voter quorum.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: run as a script or loaded from a file
from ports import port_is_free, restartable_port  # noqa: E402

__all__ = ["KafkaCluster", "KafkaNode", "free_port"]

STARTED_MARKER = "Kafka Server started"

LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.raftserver.name = kafka.server.KafkaRaftServer
logger.raftserver.level = INFO
logger.state.name = state.change.logger
logger.state.level = ERROR
"""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 that a stopped node gets back when it starts again."""
    return restartable_port()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL this child when the process that started it dies (no orphan brokers after a crash)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _random_cluster_id() -> str:
    while True:  # an id starting with "-" would be taken for an option by kafka-storage's argument parser
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class KafkaNode:
    """One combined broker+controller process."""

    def __init__(self, cluster: "KafkaCluster", node_id: int, port: int, controller_port: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        self.dir = cluster.base_dir / f"node-{node_id}"
        self.proc: Optional[subprocess.Popen] = None
        self.pid: Optional[int] = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.dir / "server.log"

    def write_config(self) -> Path:
        c = self.cluster
        n = len(c.nodes)
        rf = min(3, n)
        voters = ",".join(f"{x.node_id}@127.0.0.1:{x.controller_port}" for x in c.nodes)
        props = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": 1,
            "default.replication.factor": rf,
            "min.insync.replicas": 1,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 4,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "broker.session.timeout.ms": 4000,
            "broker.heartbeat.interval.ms": 500,
            "controller.quorum.election.timeout.ms": 1000,
            "controller.quorum.fetch.timeout.ms": 2000,
            "unclean.leader.election.enable": "true",
            "log.segment.bytes": 16 * 1024 * 1024,
            "num.network.threads": 2,
            "num.io.threads": 4,
        }
        props.update(c.extra_config)
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        return cfg

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            self.cluster.java,
            "-Xms64m",
            f"-Xmx{self.cluster.heap_mb}m",
            "-XX:+UseG1GC",
            *self.cluster.jvm_options,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            "-cp",
            str(self.cluster.lib / "*"),
            main,
            *args,
        ]

    def format(self) -> None:
        cfg = self.write_config()
        out = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", self.cluster.cluster_id, "-c", str(cfg),
                       "--ignore-formatted"),
            capture_output=True, text=True, timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError(f"formatting Kafka storage for node {self.node_id} failed:\n{out.stdout}\n{out.stderr}")

    def start(self) -> None:
        """Start the process (storage must be formatted); does not wait for readiness."""
        if self.is_running():
            return
        cfg = self.dir / "server.properties"
        log = open(self.log_file, "ab")
        self._log_offset = self.log_file.stat().st_size
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(cfg)),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=self.cluster.detached,
            preexec_fn=None if self.cluster.detached else _die_with_parent,
        )
        log.close()
        self.pid = self.proc.pid

    def wait_started(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"Kafka node {self.node_id} exited with {self.proc.returncode}; see {self.log_file}")
            with open(self.log_file, "rb") as f:
                f.seek(getattr(self, "_log_offset", 0))
                if STARTED_MARKER.encode() in f.read():
                    return
            time.sleep(0.2)
        raise TimeoutError(f"Kafka node {self.node_id} did not start within {timeout}s; see {self.log_file}")

    def is_running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True

    def stop(self, kill: bool = False, timeout: float = 30.0) -> None:
        """SIGKILL (``kill=True``, an abrupt broker loss) or SIGTERM then SIGKILL after ``timeout`` seconds."""
        if not self.is_running():
            self.proc = None
            return
        assert self.pid is not None
        try:
            os.kill(self.pid, signal.SIGKILL if kill else signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while self.is_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.is_running():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.proc = None


class KafkaCluster:
    """An N-node KRaft cluster of combined-mode nodes on 127.0.0.1.

    ``detached=False`` (tests): children die with this process and an ``atexit`` hook kills them.
    """

    def __init__(self, lib: Path, base_dir: Path, nodes: int = 1, first_port: Optional[int] = None,
                 heap_mb: int = 512, extra_config: Optional[dict] = None, detached: bool = False,
                 jvm_options: Sequence[str] = ()) -> None:
        self.lib = Path(lib)
        if not any(self.lib.glob("kafka_2.13-*.jar")):
            raise FileNotFoundError(f"no Kafka jars in {self.lib}; run `bash scripts/kafka.sh fetch` first")
        self.base_dir = Path(base_dir)
        self.java = os.environ.get("JAVA", "java")
        self.heap_mb = heap_mb
        self.jvm_options = tuple(jvm_options)
        self.extra_config = dict(extra_config or {})
        self.detached = detached
        self.cluster_id = _random_cluster_id()
        self.nodes: list[KafkaNode] = []
        for i in range(nodes):
            port = first_port + i if first_port and port_is_free(first_port + i) else free_port()
            self.nodes.append(KafkaNode(self, i + 1, port, free_port()))
        if not detached:
            atexit.register(self.stop, True)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def start(self, timeout: float = 120.0) -> "KafkaCluster":
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for n in self.nodes:
            n.format()
        for n in self.nodes:
            n.start()
        try:
            for n in self.nodes:
                n.wait_started(timeout)
        except Exception:
            self.stop(kill=True)
            raise
        return self

    def start_node(self, index: int, wait: bool = True, timeout: float = 90.0) -> None:
        self.nodes[index].start()
        if wait:
            self.nodes[index].wait_started(timeout)

    def stop_node(self, index: int, kill: bool = True) -> None:
        self.nodes[index].stop(kill=kill)

    def stop(self, kill: bool = False) -> None:
        for n in self.nodes:
            try:
                n.stop(kill=kill)
            except Exception:  # pragma: no cover - best effort cleanup
                pass

    def state(self) -> dict:
        return {"bootstrap": self.bootstrap, "nodes": [{"id": n.node_id, "pid": n.pid, "port": n.port,
                                                        "log": str(n.log_file)} for n in self.nodes]}


def _cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("--lib", required=True)
    s.add_argument("--state", required=True)
    s.add_argument("--nodes", type=int, default=1)
    s.add_argument("--port", type=int, default=9092)
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("--state", required=True)
    a = p.parse_args(argv)
    state_file = Path(a.state) / "cluster.json"
    if a.cmd == "start":
        if state_file.exists():
            st = json.loads(state_file.read_text())
            if any(_pid_alive(n["pid"]) for n in st["nodes"]):
                print(st["bootstrap"])
                print("kafka.sh: already running (bash scripts/kafka.sh stop to stop it)", file=sys.stderr)
                return 0
        import shutil
        shutil.rmtree(a.state, ignore_errors=True)
        c = KafkaCluster(Path(a.lib), Path(a.state), nodes=a.nodes, first_port=a.port, detached=True)
        c.start()
        state_file.write_text(json.dumps(c.state(), indent=2))
        print(c.bootstrap)
        print(f"kafka.sh: {a.nodes}-node KRaft cluster up; logs in {a.state}; stop with `bash scripts/kafka.sh stop`",
              file=sys.stderr)
        return 0
    if not state_file.exists():
        print("kafka.sh: not running", file=sys.stderr)
        return 0 if a.cmd == "stop" else 1
    st = json.loads(state_file.read_text())
    if a.cmd == "status":
        alive = [n for n in st["nodes"] if _pid_alive(n["pid"])]
        if not alive:
            print("kafka.sh: not running", file=sys.stderr)
            return 1
        print(st["bootstrap"])
        return 0
    for n in st["nodes"]:
        if _pid_alive(n["pid"]):
            os.kill(n["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while any(_pid_alive(n["pid"]) for n in st["nodes"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for n in st["nodes"]:
        if _pid_alive(n["pid"]):
            os.kill(n["pid"], signal.SIGKILL)
    state_file.unlink()
    print("kafka.sh: stopped", file=sys.stderr)
    return 0


def _pid_alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie or a reused pid that is not java does not count
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        return b"kafka.Kafka" in cmd
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
