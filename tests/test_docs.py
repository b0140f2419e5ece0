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


OUTLINE = ["Question", "Rule, fixed before the run", "Command", "Results", "Decision"]
"""The sections of every study page, in order (docs/experiments/README.md)."""


def test_every_study_page_has_the_studies_outline() -> None:
    index = (REPO / "docs" / "experiments" / "README.md").read_text(encoding="utf-8")
    reports, studies = index.split("## How the default recipe came about", 1)
    studies = studies.split("## Every lever tried", 1)[0]
    pages = sorted({target for target in LINK.findall(studies) if "/" not in target and target.endswith(".md")}
                   - set(LINK.findall(reports)))  # the reports (what the recipe gives and costs) have their own
    assert len(pages) >= 22, pages
    for name in [*pages, "loss-study.md"]:
        text = (REPO / "docs" / "experiments" / name).read_text(encoding="utf-8")
        assert re.findall(r"^## (.*)$", text, re.M)[:5] == OUTLINE, name


def test_guides_and_experiments_link_both_ways() -> None:
    guides = sorted((REPO / "docs").glob("*.md"))
    experiments = sorted((REPO / "docs" / "experiments").glob("*.md"))
    assert {page.name for page in experiments} >= {"README.md", "results.md", "ablation.md", "benchmarks.md",
                                                    "scale.md", "clicks.md", "shapes.md"}
    for page in experiments:
        assert "](../" in page.read_text(encoding="utf-8"), f"{page.name} links to no guide"
    linked = {target for page in guides for target in LINK.findall(page.read_text(encoding="utf-8"))}
    assert any("experiments/README.md" in target for target in linked), "no guide links to the experiments' index"
    index = set(LINK.findall((REPO / "docs" / "experiments" / "README.md").read_text(encoding="utf-8")))
    for page in experiments:  # one page per study: each listed on the index, or linked from a guide
        assert page.name == "README.md" or page.name in {target.partition("#")[0] for target in index} or any(
            f"experiments/{page.name}" in target for target in linked), f"nothing links to {page.name}"
    for page in guides:
        assert len(page.read_text(encoding="utf-8").splitlines()) <= 250, f"the guide {page.name} is long"


def test_the_configuration_reference_is_made_from_the_code() -> None:
    from rerank.cli.reference import markdown

    assert (REPO / "docs" / "configuration.md").read_text(encoding="utf-8") == markdown(), (
        "docs/configuration.md is stale: python -m rerank.cli.reference > docs/configuration.md")


COMMAND = re.compile(r"(?:^|\s)(?:rerank|python -m rerank(?:\.fit)?)\s+(?P<rest>.*)$")


def shell_blocks(text: str) -> list[str]:
    """The text of each fenced code block marked bash or sh, or unmarked."""
    blocks: list[str] = []
    inside, shell, lines = False, False, []
    for line in text.splitlines():
        if line.startswith("```"):
            if inside and shell:
                blocks.append("\n".join(lines))
            inside, shell, lines = not inside, line[3:].strip() in ("", "bash", "sh"), []
        elif inside:
            lines.append(line)
    return blocks


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """``(page, command, its --options)`` of every ``rerank ...`` line in the README's and the guides' code blocks
    (a line continued with ``\\`` joined to the next)."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in shell_blocks(page.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                match = COMMAND.search(line.split("#")[0])
                if match is None:
                    continue
                words = match["rest"].split()
                command = "fit" if "rerank.fit" in line else words[0] if words else ""
                options = [word.split("=")[0] for word in words if word.startswith("--")]
                found.append((page.name, command, options))
    return found


def test_every_command_and_option_the_readme_and_the_guides_show_exists() -> None:
    from rerank.cli import COMMANDS, schema
    from rerank.cli.commands import HELP_ALL

    shown = documented_commands()
    assert len(shown) > 20
    for page, command, options in shown:
        if command.startswith("-"):
            continue  # rerank --version, rerank --help
        assert command in COMMANDS, f"{page}: rerank {command} is no command"
        known = schema._options(command)
        for option in options:
            if option in ("--config", "--help", HELP_ALL, "--version"):
                continue
            known.lookup(known.unabbreviated(option[2:].rstrip("+")), f"{page}: rerank {command} {option}")
