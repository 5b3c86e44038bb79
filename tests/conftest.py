"""Suite-wide setup: Spark's Python workers use this interpreter and can import the repo's examples."""

import os
import sys
from pathlib import Path

REPO_ROOT = str(Path(__file__).resolve().parent.parent)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if REPO_ROOT not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *_paths])
