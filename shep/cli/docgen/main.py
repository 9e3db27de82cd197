"""The generator's command line (a developer tool: it prints, as the faces do)."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from shep.cli.docgen.pages import SCENARIOS, PageResult, compare, missing, play
from shep.cli.docgen.reference import DOCS, GENERATED
from shep.cli.docgen.scratch import ScenarioError


def _reference(check: bool) -> list[str]:
    stale = []
    for name, render in GENERATED.items():
        path = DOCS / name
        text = render()
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(f"docs/{name}")
        else:
            path.write_text(text)
    return stale


#: Scenarios play at once, but a page may show several: each reads and rewrites it in turn.
_PAGES = threading.Lock()


def _scenario(name: str, check: bool, force: bool) -> tuple[list[PageResult], float]:
    started = time.monotonic()
    played = play(name)
    with _PAGES:
        results = compare(played, force=force)
        if not check:
            for result in results:
                if result.stale or force:
                    result.path.write_text(result.text)
    return results, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shep.cli.docgen",
        description="Regenerate the docs' generated parts (or check them with --check).",
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--reference", action="store_true", help="cli.md and events.md only")
    parser.add_argument("--force", action="store_true", help="rewrite blocks that still match")
    parser.add_argument("--jobs", "-j", type=int, default=3, help="scenarios played at once")
    args = parser.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"no scenario {', '.join(unknown)}; the scenarios are {', '.join(SCENARIOS)}")

    stale = _reference(args.check)
    names = [] if args.reference else (args.scenarios or list(SCENARIOS))
    failed = False
    playable = []
    for name in names:
        lacking = missing(name)
        if lacking:
            print(f"{name}: cannot play: {lacking}", file=sys.stderr)
            failed = True
        else:
            playable.append(name)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {name: pool.submit(_scenario, name, args.check, args.force) for name in playable}
        for name, future in futures.items():
            try:
                results, took = future.result()
            except ScenarioError as e:
                print(f"{name}: {e}", file=sys.stderr)
                failed = True
                continue
            for result in results:
                for block, diff in result.stale:
                    stale.append(f"{result.label} (block {block})")
                    if args.check:
                        print(f"{result.label}: block {block} differs:\n{diff}\n", file=sys.stderr)
            pages = ", ".join(r.label for r in results)
            print(f"{name}: played in {took:.0f}s ({pages})", file=sys.stderr)
    if stale:
        verb = "stale" if args.check else "rewritten"
        print(f"{verb}: " + "; ".join(stale), file=sys.stderr)
        if args.check:
            print("run `python -m shep.cli.docgen` to regenerate them", file=sys.stderr)
    return 1 if failed or (args.check and stale) else 0
