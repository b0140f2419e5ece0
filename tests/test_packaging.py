"""rerank as a user installs it: a wheel that holds the configs its commands name, installed into a fresh virtual
environment (no editable install, no checkout on the path), whose commands then run; one version everywhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from helpers import REPO

import rerank
from rerank.version import DISTRIBUTION


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built as ``pip wheel`` builds it (with this environment's setuptools)."""
    folder = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(folder), str(REPO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = folder.glob("*.whl")
    return built


def test_the_wheel_holds_every_shipped_config_and_marks_the_package_typed(wheel: Path) -> None:
    assert wheel.name.startswith(f"{DISTRIBUTION.replace('-', '_')}-{rerank.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {path.relative_to(REPO).as_posix() for path in (REPO / "rerank" / "configs").rglob("*.yaml")}
    assert {"rerank/configs/recipes/default.yaml", "rerank/configs/collections/cranfield.yaml",
            "rerank/configs/collections/robust04.yaml", "rerank/configs/losses/hinge.yaml",
            "rerank/configs/hardware/gpu.yaml", "rerank/configs/recipes/clicks/dla.yaml",
            "rerank/configs/recipes/transfer/msmarco-pretrain.yaml"} <= shipped
    assert shipped <= names
    assert "rerank/py.typed" in names and not any(name.startswith(("tests/", "scripts/", "docs/")) for name in names)


def test_the_wheel_installed_in_a_fresh_environment_runs_the_missions_command(wheel: Path, tmp_path: Path) -> None:
    """A fresh venv with the wheel alone (its dependencies read from this environment's site-packages, whose
    editable install of rerank is not on the path): ``rerank --version`` and ``rerank fit --config robust04.yaml
    --print_config`` (and ``python -m rerank.fit``) from a folder outside the checkout."""
    environment = tmp_path / "env"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # no .pth of it is read
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"RERANK_CACHE": str(tmp_path / "cache")}

    def run(*command: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(command), cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)

    where = run(str(python), "-c", "import rerank; print(rerank.__file__)")
    assert where.stdout.strip().startswith(site), where.stdout + where.stderr  # the wheel's, not the checkout's
    version = run(str(environment / "bin" / "rerank"), "--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"rerank {rerank.__version__} (the {DISTRIBUTION} package)"
    for command in ([str(environment / "bin" / "rerank"), "fit"], [str(python), "-m", "rerank.fit"]):
        printed = run(*command, "--config", "robust04.yaml", "--print_config")
        assert printed.returncode == 0, printed.stderr[-3000:]
        assert "ir_datasets: disks45/nocr/trec-robust-2004" in printed.stdout and "scheme: robust04" in printed.stdout


def test_one_version_is_said_by_the_command_the_package_and_the_changelog() -> None:
    done = subprocess.run([sys.executable, "-m", "rerank", "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.split()[1] == rerank.__version__
    newest = re.search(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert newest is not None and newest[1] == rerank.__version__
