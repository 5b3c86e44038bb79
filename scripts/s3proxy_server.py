"""A real S3-compatible server for the tests and the bench: S3Proxy (Maven Central, ``scripts/s3proxy.sh``) on 127.0.0.1
with its filesystem backend, so it can be killed and started again on the same port with every object still there (an
outage, not a data loss).

The server dies with the process that started it (PR_SET_PDEATHSIG) and at its exit. Standard library only.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Optional

from ports import port_is_free, restartable_port  # scripts/, where this module is imported from

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["S3ProxyServer", "s3proxy_jar", "ACCESS_KEY", "SECRET_KEY"]
ACCESS_KEY = "keyedstate-test"
SECRET_KEY = "keyedstate-test-secret"


def s3proxy_jar() -> Path:
    """The S3Proxy jar, fetched into .cache/s3proxy/ when missing."""
    result = subprocess.run(["bash", str(ROOT / "scripts" / "s3proxy.sh"), "jar"], check=True, timeout=600,
                            capture_output=True, text=True)
    return Path(result.stdout.strip().splitlines()[-1])


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class S3ProxyServer:
    """``start()``/``kill()``/``start()`` again: same port, same objects."""

    bucket = ""  # the current test's bucket (the ``s3`` fixture sets it)

    def __init__(self, jar: Path, data_dir: Path, secret_key: str = SECRET_KEY) -> None:
        self.jar = jar
        self.secret_key = secret_key
        self.data_dir = data_dir
        self.port = restartable_port()
        self.process: Optional[subprocess.Popen] = None
        data_dir.mkdir(parents=True, exist_ok=True)
        self.config = data_dir.parent / f"s3proxy-{self.port}.properties"
        self.config.write_text("\n".join([
            f"s3proxy.endpoint=http://127.0.0.1:{self.port}",
            "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={ACCESS_KEY}",
            f"s3proxy.credential={secret_key}",
            "jclouds.provider=filesystem-nio2",
            f"jclouds.filesystem.basedir={data_dir}",
        ]) + "\n")
        self.log = data_dir.parent / f"s3proxy-{self.port}.log"
        atexit.register(self.kill)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self, **extra) -> dict:
        """``state_storage_options`` reaching this server."""
        return {"endpoint_url": self.endpoint_url, "access_key": ACCESS_KEY, "secret_key": self.secret_key,
                "region": "us-east-1", **extra}

    def new_bucket(self) -> str:
        name = f"ks-{uuid.uuid4().hex[:12]}"
        (self.data_dir / name).mkdir()  # the filesystem backend: a bucket is a directory
        return name

    def start(self, timeout: float = 60.0) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        if not port_is_free(self.port):  # otherwise the probe below would reach the process that holds it
            raise RuntimeError(f"cannot start S3Proxy: another process holds its port {self.port}")
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                ["java", "-Xmx256m", "-jar", str(self.jar), "--properties", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # the death signal follows the starting *thread*: only the main thread lives as long as the tests
                preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"S3Proxy exited with {self.process.returncode}; see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"S3Proxy did not listen on port {self.port} within {timeout:g} s; see {self.log}")

    def kill(self) -> None:
        """SIGKILL: connections are refused from now on; the objects stay on disk."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None
