"""A home with a waiting run, and a `shep ui` process serving it, shared by a module's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from events.store import EventStore
from tests.shep.web.ui_server import UiServer
from tests.support.store_items import ask_on_new_run, gate, question

ROOT = Path(__file__).resolve().parents[3]


def make_home(root: Path) -> tuple[Path, dict[str, str]]:
    """A home holding a gated-review run that waits on a question and a gate."""
    home = root / "home"
    home.mkdir(mode=0o700)
    repo = root / "repo"
    repo.mkdir()
    (repo / "shep-review.md").write_text("# Review\n")
    with EventStore(home / "shep.db") as store:
        run_id, items = ask_on_new_run(store, repo, [question("q1"), gate("g1")], resumed=False)
    return home, {"run": run_id.hex, "question": items[0].hex, "gate": items[1].hex}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UiServer, dict[str, str]]]:
    """`shep ui` on a home with a waiting run (its id, its question's and its gate's)."""
    home, ids = make_home(tmp_path_factory.mktemp("ui"))
    server = UiServer.start(env={"SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)})
    try:
        yield server, ids
    finally:
        server.stop()
