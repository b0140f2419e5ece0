"""Test session set-up: an offline ir_datasets cache seeded from ../shared/irds_home.

ir_datasets reads IR_DATASETS_HOME when its dataset modules are imported and writes doc stores into it, so a
writable copy of the read-only seed is made once per session, before any test imports ir_datasets.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"

if "IR_DATASETS_HOME" not in os.environ and (SHARED / "irds_home").is_dir():
    _root = tempfile.mkdtemp(prefix="rerank-irds-")
    atexit.register(shutil.rmtree, _root, ignore_errors=True)
    _home = Path(_root) / "irds_home"
    shutil.copytree(SHARED / "irds_home", _home)
    os.environ["IR_DATASETS_HOME"] = str(_home)
