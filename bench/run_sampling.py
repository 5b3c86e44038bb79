"""What a benchmark run measures besides time: bytes written below a directory between two samples, the base
snapshots RocksDB mode wrote meanwhile, and the peak resident memory of the run's Spark Python workers (used by
bench/large_state_workload.py)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


def files_under(directory: Path) -> dict[str, tuple[int, int]]:
    """path -> (inode, size) of every file below ``directory``."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:  # deleted while walking
                continue
            out[os.path.join(root, name)] = (st.st_ino, st.st_size)
    return out


def bytes_written(before: dict, after: dict) -> int:
    """Bytes written between two samples: new or replaced files count whole, appended files their growth. Files
    deleted since ``before`` were counted when they appeared; files created and deleted between samples are missed."""
    total = 0
    for path, (inode, size) in after.items():
        old = before.get(path)
        if old is None or old[0] != inode:
            total += size
        elif size > old[1]:
            total += size - old[1]
    return total


def new_bases(before: dict, after: dict) -> list[tuple[int, int]]:
    """(bytes uploaded, bytes of the base) of each RocksDB-mode base snapshot whose manifest
    (``kg-<key group>/b<batch>-<tag>.json``) appeared between two samples of the state storage."""
    bases = []
    for path, (inode, _) in after.items():
        name, directory = os.path.basename(path), os.path.basename(os.path.dirname(path))
        if not (name.startswith("b") and name.endswith(".json") and directory.startswith("kg-")):
            continue
        if path in before and before[path][0] == inode:
            continue
        try:
            manifest = json.loads(Path(path).read_text())
        except (OSError, ValueError):  # collected meanwhile
            continue
        bases.append((int(manifest["uploaded_bytes"]), int(manifest["total_bytes"])))
    return bases


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out += children.get(pid, [])
        todo += children.get(pid, [])
    return out


def process_tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system) spent so far by ``root`` (default: this process) and its descendants: in local
    mode the driver, Spark's JVM and its Python workers. A child that exited counts through its parent's
    children-times once reaped, as Spark's Python daemon reaps its workers."""
    root = os.getpid() if root is None else root
    ticks = 0
    for pid in [root] + _descendants(root):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile: its time is in its parent's children-times
            continue
        ticks += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


JIT_COMPILER_THREAD_PREFIXES = ("C1 CompilerThre", "C2 CompilerThre")
"""How HotSpot names its JIT compiler threads in /proc (a thread's name is cut to 15 characters there)."""


def jit_compiler_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system) spent so far by the JIT compiler threads of the JVMs below ``root`` (default:
    this process). Exact only for a JVM that keeps its compiler threads (``-XX:-UseDynamicNumberOfCompilerThreads``):
    HotSpot otherwise starts and ends them as its queue grows and shrinks, and an ended thread's time leaves this
    sum while it stays in the process's."""
    root = os.getpid() if root is None else root
    ticks = 0
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/comm") as comm:
                if comm.read().strip() != "java":
                    continue
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{pid}/task/{thread}/comm") as comm:
                    if not comm.read().startswith(JIT_COMPILER_THREAD_PREFIXES):
                        continue
                with open(f"/proc/{pid}/task/{thread}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            ticks += sum(int(value) for value in fields[11:13])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


class WorkerMemory:
    """Peak resident memory (VmHWM) of this process's Spark Python workers, sampled every second in the background
    so a worker that exits mid-run (Spark reaps idle workers after a minute) still counts."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        for pid in _descendants(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    command = cmdline.read()
                if b"pyspark.daemon" in command or b"pyspark.worker" in command:
                    with open(f"/proc/{pid}/status") as status:
                        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
                    self.peaks[pid] = max(self.peaks.get(pid, 0), kib)
            except (OSError, ValueError, StopIteration):  # the process ended meanwhile
                continue

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def __enter__(self) -> "WorkerMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
