"""The benchmark scripts that docs/benchmarks.md's tables come from run and report what their tables show (the
figures themselves are measured by hand, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MINILM_VOCAB, REPO, tiny_bert


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home (MiniLM's vocabulary)")
def test_the_settings_bench_times_each_setting_at_each_length(tmp_path: Path) -> None:
    model = tiny_bert(tmp_path / "bert", real_vocabulary=True)
    done = subprocess.run([sys.executable, "scripts/bench_train.py", "settings", "--model", str(model),
                           "--list_size", "4", "--lengths", "8", "16", "--steps", "1", "--rounds", "1",
                           "--output", str(tmp_path / "settings.json")], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "settings.json").read_text())["results"]
    assert list(results) == ["8", "16"]
    for row in results.values():
        assert list(row) == ["stock", "encoder dropout 0", "frozen embeddings", "both"]
        assert all(seconds > 0 for seconds in row.values())


def test_the_startup_bench_reports_which_libraries_each_case_loaded(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "scripts/bench_startup.py", "--repeat", "1", "--output",
                           str(tmp_path / "startup.json")], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "startup.json").read_text())["results"]
    assert all(results[case]["loaded"] == "-" for case in results if case != "from rerank import Reranker")
    assert results["from rerank import Reranker"]["loaded"] == "torch"
