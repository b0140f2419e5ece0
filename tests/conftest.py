"""Test session set-up, offline: an ir_datasets cache seeded from ../shared/irds_home, and the Hugging Face
cache in ../shared/hf_home.

ir_datasets reads IR_DATASETS_HOME when its dataset modules are imported and writes doc stores into it, so a
writable copy of the read-only seed is made once per session, before any test imports ir_datasets. The Hugging
Face cache is only read (HF_HUB_OFFLINE=1), and must be set before transformers is imported.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"

if "IR_DATASETS_HOME" not in os.environ and (SHARED / "irds_home").is_dir():
    _root = tempfile.mkdtemp(prefix="rerank-irds-")
    atexit.register(shutil.rmtree, _root, ignore_errors=True)
    _home = Path(_root) / "irds_home"
    shutil.copytree(SHARED / "irds_home", _home)
    for _path in (_home, *_home.rglob("*")):  # the seed is read-only; ir_datasets writes doc stores beside its files
        _path.chmod(_path.stat().st_mode | stat.S_IWUSR)
    os.environ["IR_DATASETS_HOME"] = str(_home)

if "HF_HOME" not in os.environ and (SHARED / "hf_home").is_dir():
    os.environ["HF_HOME"] = str(SHARED / "hf_home")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

# One thread per process in the parallel run: pytest-xdist starts a worker per core, and many tests start processes
# of their own; with torch's default (a thread per core each) they outnumber the cores and wait on each other.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# The modules whose tests run commands in subprocesses (fits, cross-validations, kills): first in the collection,
# so that the parallel run (pytest-xdist, pyproject.toml) starts its longest tests at once and ends together.
LONG_MODULES = ("test_training.py", "test_faults.py", "test_export.py", "test_cv.py")


def pytest_collection_modifyitems(items: list) -> None:
    items.sort(key=lambda item: item.path.name not in LONG_MODULES)  # stable: the order within a module stays
