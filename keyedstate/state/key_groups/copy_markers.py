"""The files a key group's local database directory holds besides RocksDB's own: which committed version it is at
(absent while a call has it open), and which stored base it wrote or was downloaded from."""

import logging
import os
import uuid
from typing import Optional

from keyedstate.state.rocksdb.versions import VersionRecord

__all__ = ["TAG_FILE", "BASE_FILE", "read_tag", "write_tag", "remove_tag", "holds_base", "mark_base"]

logger = logging.getLogger("keyedstate.spark.rocksdb")


TAG_FILE = "KEYEDSTATE-TAG"
"""In a closed local database: the tag of the committed version it holds (absent while a call has it open)."""


def read_tag(path: str) -> Optional[str]:
    try:
        with open(os.path.join(path, TAG_FILE), encoding="ascii") as file:
            return file.read().strip() or None
    except OSError:
        return None


def write_tag(path: str, tag: str) -> None:
    _replace(path, TAG_FILE, tag)


def remove_tag(path: str) -> None:
    try:
        os.remove(os.path.join(path, TAG_FILE))
    except FileNotFoundError:
        pass


BASE_FILE = "KEYEDSTATE-BASE"
"""In a local database: the name of the stored base it wrote or was downloaded from. No copy holds more of that
base's files, so it writes the next base when the policy asks, even if compaction replaced most of them."""


def holds_base(path: str, record: Optional[VersionRecord]) -> bool:
    """Whether the local database in ``path`` wrote or was downloaded from ``record``'s base."""
    if record is None or record.base is None:
        return False
    try:
        with open(os.path.join(path, BASE_FILE), encoding="ascii") as file:
            return file.read().strip() == record.base.name
    except OSError:
        return False


def mark_base(path: str, record: VersionRecord) -> None:
    """Record that the local database in ``path`` wrote or was downloaded from ``record``'s base. Best effort: a
    mark that cannot be written only leaves the choice of the copy that writes the next base to the files it holds."""
    if record.base is None or not os.path.isdir(path):
        return
    try:
        _replace(path, BASE_FILE, record.base.name)
    except OSError as error:
        logger.debug("cannot mark %s as holding the base %s: %s", path, record.base.name, error)


def _replace(path: str, name: str, text: str) -> None:
    """Write ``text`` as the file ``name`` in ``path``; a reader sees the old content or the new, never a part."""
    temporary = os.path.join(path, f".{name}.{uuid.uuid4().hex[:8]}")
    try:
        with open(temporary, "w", encoding="ascii") as file:
            file.write(text)
        os.replace(temporary, os.path.join(path, name))
    except OSError:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise
