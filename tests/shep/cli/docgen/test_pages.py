"""The pages that show output show what the program prints.

The slow tests play each scenario for real (the CLI, background workers, a
PostgreSQL server for teams.md) and fail, naming the page and the block, when
a page's block no longer matches the fresh run under the masks. The fast
tests pin the machinery: markers, stand-ins, masks, the comparison, and the
scratch world's commands.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from shep.cli.docgen.blocks import MarkerError, find_blocks, replace_blocks
from shep.cli.docgen.pages import SCENARIOS, Played, compare, missing, page_paths, play
from shep.cli.docgen.scratch import ScenarioError, Scratch
from shep.cli.docgen.stable import loosened, mask, stand_in
from tests.support.postgres_server import REQUIRE_ENV


def _hex(n: int) -> str:
    return "".join(random.choice("0123456789abcdef") for _ in range(n))


def test_every_marker_names_a_scenario() -> None:
    """Every generated block on the pages names a known scenario and follows its marker with
    a fenced block; every scenario has a page."""
    used = set()
    for path in page_paths():
        blocks = find_blocks(path.read_text(), path.name)
        assert {b.scenario for b in blocks} <= set(SCENARIOS), path.name
        used |= {b.scenario for b in blocks}
    assert used == set(SCENARIOS)


def test_a_marker_without_its_block_is_refused() -> None:
    """A marker must be followed by a fence that is closed; a step marked twice is refused."""
    with pytest.raises(MarkerError, match=r"page line 1: .* followed by"):
        find_blocks("<!-- generated: a/b -->\ntext\n")
    with pytest.raises(MarkerError, match="never closed"):
        find_blocks("<!-- generated: a/b -->\n```console\n$ shep\n")
    twice = "<!-- generated: a/b -->\n```\n```\n<!-- generated: a/b -->\n```\n```\n"
    with pytest.raises(MarkerError, match="marked twice"):
        find_blocks(twice)


def test_only_the_marked_blocks_are_rewritten() -> None:
    """Prose and unmarked blocks stay byte for byte; a marked block takes the new text."""
    page = (
        "Prose.\n\n```console\n$ hand written\n```\n\n"
        "<!-- generated: s/one -->\n```console\n$ old\nold output\n```\nMore prose.\n"
    )
    new = replace_blocks(page, {"s/one": "$ new\nnew output"})
    assert new == page.replace("$ old\nold output", "$ new\nnew output")


def test_stand_ins_are_the_same_for_two_runs_and_keep_prefixes() -> None:
    """Two runs of one story, with other ids, hashes and pids, give the same page text; a run
    id's 8-digit prefix stays the prefix of the run id's stand-in; distinct values differ."""

    def story() -> tuple[list[str], set[str]]:
        run, item, head = _hex(32), _hex(32), _hex(64)
        pid = random.randint(100, 4_000_000)
        texts = [
            f"$ shep run x --background\n{run}\nStarted worker {pid}. `shep logs {run[:8]}`",
            f"{item[:8]}  question  run {run[:8]}\nHead hash: {head}\n(pid {pid})",
        ]
        return texts, {run, item, head}

    random.seed(1)
    first, known_first = story()
    second, known_second = story()
    out_first = stand_in(first, known_first, "page.md")
    assert out_first == stand_in(second, known_second, "page.md")
    run = out_first[0].split("\n")[1]
    assert f"logs {run[:8]}" in out_first[0]
    assert f"run {run[:8]}" in out_first[1]
    assert out_first[1][:8] != run[:8]
    assert first[0] not in out_first[0]


def test_an_all_digit_short_id_is_recognised_through_the_store() -> None:
    """A prefix with no hex letter (one in forty 8-digit prefixes) is still replaced when the
    store holds the full value, and a plain number is not."""
    run = "12345678" + "abcdef0123456789abcdef01"
    out = stand_in(["run 12345678 of 87654321 files"], {run}, "page.md")[0]
    assert "12345678" not in out
    assert out.endswith("of 87654321 files")


def test_an_all_digit_whole_id_the_store_holds_is_replaced_and_numbered() -> None:
    """A whole value with no hex letter (a worktree's 12-digit name: about one in 280) is
    replaced when the store holds it, and the ids after it get the stand-ins they get when
    it has letters: the page does not change with the luck of the draw. A number the store
    does not hold is left as it is."""
    item = "cb640281" + "0" * 24
    lettered = stand_in(
        [f"worktree /w/1e88711bcf58/x\nitem {item[:8]}"], {"1e88711bcf58", item}, "p"
    )
    digits = stand_in([f"worktree /w/879877271485/x\nitem {item[:8]}"], {"879877271485", item}, "p")
    assert lettered == digits
    assert "879877271485" not in digits[0]
    assert stand_in(["port 879877271485"], set(), "p") == ["port 879877271485"]


def test_masks_leave_out_what_varies_and_nothing_else() -> None:
    """Times, ages, durations, byte offsets and column widths are masked; words and counts
    are compared."""
    one = "10:52:39  done in 0.1s  AGE 5s\ncreated 2026-11-23T10:35:22.254276+00:00 (byte 481)"
    two = "11:02:01  done in 12.4s  AGE  13s\ncreated 2026-12-01T08:00:01.1+00:00 (byte 47720)"
    assert mask(one) == mask(two)
    assert mask("3/5 nodes") != mask("4/5 nodes")
    assert mask("Run completed.") != mask("Run failed.")


def test_loose_blocks_compare_lines_in_any_order() -> None:
    """Lines of parallel tasks may come in either order; their content is still compared."""
    one = "task t2: Add the entry\ntask t3: Test the core\n← 11 files"
    two = "task t3: Test the core\ntask t2: Add the entry\n← 12 files"
    assert loosened(one) == loosened(two)
    assert loosened(one) != loosened("task t2: Add the entry\n← 11 files")


def test_a_stale_block_is_named_and_only_then_rewritten(tmp_path: Path) -> None:
    """compare() names the page and block whose text the program no longer prints, and
    rewrites the page from the fresh run; a page that matches under the masks is kept."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n<!-- generated: demo/status -->\n```console\n$ shep status\n"
        "1 waiting  5s\n```\n\nProse.\n"
    )
    same = Played("demo", {"status": "$ shep status\n1 waiting  17s"}, set())
    (kept,) = compare(same, pages=[page])
    assert kept.stale == []
    changed = Played("demo", {"status": "$ shep status\n2 waiting  5s"}, set())
    (result,) = compare(changed, pages=[page])
    assert [name for name, _ in result.stale] == ["demo/status"]
    assert "-1 waiting <dur>" in result.stale[0][1]
    assert "+2 waiting <dur>" in result.stale[0][1]
    assert "2 waiting  5s" in result.text
    assert result.text.endswith("```\n\nProse.\n")


def test_a_step_no_page_marks_is_an_error(tmp_path: Path) -> None:
    """A scenario step that no page shows is reported, so that scenarios and pages stay in
    step with each other."""
    page = tmp_path / "page.md"
    page.write_text("<!-- generated: demo/one -->\n```\n```\n")
    with pytest.raises(ScenarioError, match="no page marks: two"):
        compare(Played("demo", {"one": "x", "two": "y"}, set()), pages=[page])


def test_the_scratch_world_runs_the_real_cli(tmp_path: Path) -> None:
    """Commands run through bash with this interpreter's shep, in a home of the scratch
    directory, as alice on vm; outputs show the scratch directory as /tmp/doc; an
    unexpected exit status is an error naming the command and its output."""
    scratch = Scratch(tmp_path / "scratch")
    shown = scratch.sh(
        "shep inbox && echo $SHEP_HOME && whoami_is=$USER@$SHEP_HOST; echo $whoami_is"
    )
    assert shown.output == "The inbox is empty.\n/tmp/doc/home\nalice@vm\n"
    with pytest.raises(ScenarioError, match="`shep answer nope --option x` exited 2"):
        scratch.sh("shep answer nope --option x")


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pages_show_what_the_program_prints(scenario: str) -> None:
    """The scenario, played for real, prints what its pages' blocks show (under the masks);
    otherwise the failure names each page and block, with the difference, and
    `python -m shep.cli.docgen` regenerates them."""
    lacking = missing(scenario)
    if lacking:
        if scenario == "teams" and os.environ.get(REQUIRE_ENV):
            pytest.fail(f"teams: {lacking}")
        pytest.skip(lacking)
    stale = [
        f"{result.label}: block {block} no longer matches the program:\n{diff}"
        for result in compare(play(scenario))
        for block, diff in result.stale
    ]
    assert not stale, (
        "\n\n".join(stale) + "\nRegenerate with: python -m shep.cli.docgen " + scenario
    )
