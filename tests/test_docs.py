"""The docs hold together: every relative link of README.md and docs/ reaches a file of the repository, and a link
to a section reaches a heading of that file (GitHub's anchors); guides (docs/) and experiments (docs/experiments/)
link to each other; every guide is short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's anchor of each heading of ``page`` (lower case, punctuation dropped, spaces as hyphens)."""
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(REPO)) for page in PAGES])
def test_every_link_reaches_its_file_and_section(page: Path) -> None:
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, section = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.relative_to(REPO)}: {target} reaches no file"
        if section and linked.suffix == ".md":
            assert section in anchors(linked), f"{page.relative_to(REPO)}: {target} reaches no section"


def test_guides_and_experiments_link_both_ways() -> None:
    guides = sorted((REPO / "docs").glob("*.md"))
    experiments = sorted((REPO / "docs" / "experiments").glob("*.md"))
    assert {page.name for page in experiments} >= {"results.md", "ablations.md", "benchmarks.md", "scale.md",
                                                    "clicks.md", "shapes.md"}
    for page in experiments:
        assert "](../" in page.read_text(encoding="utf-8"), f"{page.name} links to no guide"
    linked = {target for page in guides for target in LINK.findall(page.read_text(encoding="utf-8"))}
    for page in experiments:
        assert any(f"experiments/{page.name}" in target for target in linked), f"no guide links to {page.name}"
    for page in guides:
        assert len(page.read_text(encoding="utf-8").splitlines()) <= 250, f"the guide {page.name} is long"
