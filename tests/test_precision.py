"""bfloat16 autocast where the CPU computes in bfloat16, float32 where it would only emulate it
(rerank.training.precision)."""

from __future__ import annotations

import logging
import platform
from pathlib import Path

import pytest
from helpers import MINILM_VOCAB, cranfield_workdir
from test_training import fit_config

from rerank.cli.arguments import RerankCLI
from rerank.core import hardware
from rerank.training import precision


def cpuinfo_flags() -> set[str] | None:
    """The processor's feature flags as the Linux kernel reports them (an independent reading)."""
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


@pytest.mark.skipif(platform.machine().lower() not in hardware.X86 or cpuinfo_flags() is None,
                    reason="needs an x86 Linux processor")
def test_bf16_and_int8_instructions_are_read_as_the_kernel_reports_them() -> None:
    flags = cpuinfo_flags()
    assert hardware.cpu_computes_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)
    assert hardware.cpu_has_int8_dot() == bool({"avx512_vnni", "avx_vnni", "amx_int8"} & flags)


@pytest.mark.parametrize("configured", ["bf16-mixed", "bf16", "16-mixed", "16"])
def test_half_precision_on_a_cpu_without_bf16_trains_in_float32(
        configured: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(precision, "cpu_computes_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger="rerank.training.precision"):
        assert precision.effective_precision(configured, "cpu") == "32-true"
    assert f"trainer.precision {configured}" in caplog.text and "32-true instead" in caplog.text


@pytest.mark.parametrize(("configured", "accelerator", "has_bf16"), [
    ("bf16-mixed", "cpu", True),  # the processor computes in bfloat16
    ("32-true", "cpu", False),  # nothing to change
    ("bf16-true", "cpu", False),  # the weights themselves in bfloat16: what the user asked for, not autocast
    ("bf16-mixed", "gpu", False),  # not the CPU's business
    ("16-mixed", "cuda", False),
])
def test_other_settings_keep_the_configured_precision(
        configured: str, accelerator: str, has_bf16: bool, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(precision, "cpu_computes_bf16", lambda: has_bf16)
    with caplog.at_level(logging.WARNING, logger="rerank.training.precision"):
        assert precision.effective_precision(configured, accelerator) == configured
    assert not caplog.text


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
@pytest.mark.parametrize("has_bf16", [True, False])
def test_the_trainer_and_the_recorded_config_get_the_effective_precision(
        has_bf16: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "cpu_computes_bf16", lambda: has_bf16)
    monkeypatch.setattr(precision, "trains_on_cpu", lambda accelerator: True)
    workdir = cranfield_workdir(tmp_path / "work")
    config = fit_config(workdir, tmp_path / "config.yaml")
    cli = RerankCLI(["--config", str(config), "--trainer.precision", "bf16-mixed", "--output_dir",
                     str(tmp_path / "out")], prog="test", description="test")
    expected = "bf16-mixed" if has_bf16 else "32-true"
    assert cli.trainer.precision == expected
    assert cli.config.trainer.precision == expected  # what rerank fit records in the run's config.yaml
