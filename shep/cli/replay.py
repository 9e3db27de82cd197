"""``shep replay``: step through a run's history, read-only (frames: ``shep.replay``).

On a terminal it is a full-screen stepper (prompt-toolkit, imported only
then); otherwise it prints the frames, as text or as one JSON object per line.
It opens no projection, starts no worker or agent, and never runs ``shep
fork``: ``f`` only prints the command.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click
import msgspec

from events.display import printable, short_id
from events.inbox_status import ItemStatus
from events.words import counted
from shep.cli.render import wrapped
from shep.home.runtime import Runtime
from shep.replay import Frame, Lineage, Replay, ReplayInputError, format_ms

if TYPE_CHECKING:
    from prompt_toolkit.buffer import Buffer
    from prompt_toolkit.filters import Filter
    from prompt_toolkit.input import Input
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.layout import Layout, Window
    from prompt_toolkit.output import Output

    from shep.audit.bundle_verify import BundleReport

#: The frame list's width on a screen wide enough for it.
_TIMELINE = 26
_KIND_MARKS = {"run": "◆", "node": "●", "question": "?", "approval": "!", "decision": "✓"}


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--at",
    metavar="N|last",
    help="Start at frame N (from 1), or at the last frame. With --json, print from there on.",
)
@click.option("--json", "as_json", is_flag=True, help="Print each frame as one JSON object.")
@click.option("--tree", is_flag=True, help="Show the fork lineage of RUN instead of its frames.")
@click.option(
    "--bundle",
    metavar="FILE",
    help="Replay from an audit bundle (`shep audit export --format bundle`), without a store; "
    "only a bundle that verifies (`shep audit verify --bundle`) is replayed.",
)
@click.pass_obj
def replay(
    runtime: Runtime, run_ref: str, at: str | None, as_json: bool, tree: bool, bundle: str | None
) -> None:
    """Step through RUN's history: each node and iteration with the agent's output and what
    it changed in the workflow state, each question or gate with its decision (who, when,
    why), worktree snapshots of feature runs, agent time and waiting time apart.

    Read-only: the store is opened read-only and nothing is run. On a terminal, keys:
    n/→ next, p/← previous, g jump to a node, / search, f print the `shep fork` command
    for the frame, q quit. Elsewhere the frames are printed (--json: one object per line).
    """
    from shep import replay as frames

    def verified(report: BundleReport) -> None:
        signed = f"signed by {report.signer}" if report.signer else "not signed"
        click.echo(
            f"{bundle} verifies: {counted(report.count or 0, 'event')}, head hash "
            f"{report.head_hash}; {signed}.",
            err=True,
        )

    if tree:
        if bundle is not None:
            run_hex, lineage = frames.lineage_from_bundle(bundle, run_ref, on_verified=verified)
        else:
            run_hex, lineage = frames.lineage_from_store(runtime.db_file, run_ref)
        if as_json:
            click.echo(msgspec.json.encode(lineage).decode())
        else:
            click.echo("\n".join(render_tree(lineage, run_hex)))
        return
    if bundle is not None:
        history = frames.frames_from_bundle(bundle, run_ref, on_verified=verified)
    else:
        history = frames.frames_from_store(runtime.db_file, run_ref)
    start = frame_number(at, len(history))
    if as_json:
        encode = msgspec.json.Encoder().encode
        out = sys.stdout
        for index in range(start, len(history) + 1):
            out.write(encode(history.frame(index)).decode() + "\n")
        out.flush()
        return
    if sys.stdin.isatty() and sys.stdout.isatty():
        for command in step_through(history, start).fork_commands:
            click.echo(command)
        return
    click.echo(render_header(history))
    for index in range(start, len(history) + 1):
        click.echo("")
        click.echo(render_frame(history.frame(index), len(history)))


def frame_number(at: str | None, total: int) -> int:
    """The frame ``--at`` names (from 1; ``last``), checked against the run's ``total``."""
    if at is None:
        return 1
    if at.strip().lower() == "last":
        return total
    try:
        number = int(at)
    except ValueError:
        raise ReplayInputError(f"--at takes a frame number or `last`, not {at!r}.") from None
    if not 1 <= number <= total:
        raise ReplayInputError(f"--at {number}: the run has frames 1 to {total}.")
    return number


# --- text ----------------------------------------------------------------------------


def render_header(history: Replay) -> str:
    run = history.summary
    origin = (
        f", forked from {short_id(run.origin_run)} at {run.origin_checkpoint_id}"
        if run.origin_run
        else ""
    )
    return printable(
        f"Run {run.run}: {run.workflow} on {run.repo} with {run.agent}, {run.status}, "
        f"{counted(len(history), 'frame')}{origin}"
    )


def render_frame(frame: Frame, total: int) -> str:
    """A frame as text, with agents' and people's text made safe for a terminal."""
    lines = [f"#{frame.index}/{total} [{frame.kind}] {frame.title}", "  " + _facts(frame)]
    if frame.checkpoint_id:
        lines.append(f"  checkpoint {frame.checkpoint_id}")
    if frame.decision is not None:
        d = frame.decision
        lines += ["decision:", f"  {d.verdict} by {d.actor} at {d.at}"]
        lines += [f"  answer: {d.answer}"] if d.answer is not None else []
        lines += [f"  reason: {d.reason}"] if d.reason else []
        lines += [f"  policy: {d.policy}"] if d.policy else []
    if frame.output:
        lines.append({"node": "output:", "run": "inputs:"}.get(frame.kind, "asked:"))
        lines += [f"  {line}" for line in frame.output]
    lines += _state_lines(frame)
    if frame.snapshot:
        since = f" (since {frame.previous_snapshot[:10]})" if frame.previous_snapshot else ""
        lines.append(f"snapshot {frame.snapshot[:10]}{since}:")
        lines += [f"  {line}" for line in (frame.diff_stat or "").splitlines()]
    if frame.notes:
        lines += ["notes:", *(f"  {note}" for note in frame.notes)]
    if frame.fork_command:
        lines.append(f"fork here: {frame.fork_command}")
    return printable("\n".join(lines))


def _facts(frame: Frame) -> str:
    facts = [frame.at, f"positions {frame.first_position}-{frame.last_position}"]
    if frame.iteration is not None and frame.kind != "run":
        facts.append(f"iteration {frame.iteration}")
    if frame.agent_ms is not None:
        facts.append(f"agent {format_ms(frame.agent_ms)}")
    if frame.waited_ms is not None:
        facts.append(f"waited {format_ms(frame.waited_ms)}")
    if frame.usage is not None:
        facts.append(f"tokens {frame.usage.input_tokens} in, {frame.usage.output_tokens} out")
    return "  ".join(facts)


def _state_lines(frame: Frame) -> list[str]:
    diff = frame.state
    if diff is None or not (diff.added or diff.changed or diff.removed):
        return []
    lines = ["state:"]
    lines += [f"  + {key} = {value}" for key, value in diff.added.items()]
    lines += [f"  ~ {key}: {old} → {new}" for key, (old, new) in diff.changed.items()]
    lines += [f"  - {key} (was {value})" for key, value in diff.removed.items()]
    if diff.omitted:
        lines.append(f"  … {counted(diff.omitted, 'more key')}")
    return lines


def render_tree(lineage: Lineage, this_run: str) -> list[str]:
    """The fork tree as indented lines, ``◀ this run`` marking the one asked about."""
    lines: list[str] = []

    def describe(item: Lineage) -> str:
        if not item.known:
            text = f"{short_id(item.run)}  (not in this log)"
        else:
            text = f"{short_id(item.run)}  {item.workflow}  {item.created_at}  by {item.created_by}"
        if item.checkpoint_id:
            text += f"  at checkpoint {item.checkpoint_id}"
        if item.run == this_run:
            text += "  ◀ this run"
        return printable(text)

    def walk(item: Lineage, prefix: str, last: bool, root: bool) -> None:
        if root:
            lines.append(describe(item))
            child_prefix = ""
        else:
            lines.append(f"{prefix}{'└── ' if last else '├── '}{describe(item)}")
            child_prefix = prefix + ("    " if last else "│   ")
        for n, fork in enumerate(item.forks):
            walk(fork, child_prefix, n == len(item.forks) - 1, False)

    walk(lineage, "", True, True)
    return lines


# --- the stepper ---------------------------------------------------------------------


class Stepper:
    """Where the stepper is; what it leaves behind is ``fork_commands``, printed on exit."""

    def __init__(self, history: Replay, cursor: int) -> None:
        self.history, self.cursor, self.scroll = history, cursor, 0
        #: "goto" or "search" while a name or text is typed in the prompt line.
        self.mode: str | None = None
        self.message = ""
        self.last_query = ""
        self.fork_commands: list[str] = []

    def text(self, index: int) -> str:
        return render_frame(self.history.frame(index), len(self.history))

    def lines(self) -> list[str]:
        """The frame under the cursor as its pane shows it: wrapped at words to the pane's
        width, its fork command kept whole (or broken before ``--at`` with `` \\``).
        """
        command = self.history.frame(self.cursor).fork_command
        return wrapped(self.text(self.cursor), _pane_width(), commands=[command] if command else [])

    def body(self) -> str:
        """The frame under the cursor, from the line scrolled to."""
        return "\n".join(self.lines()[self.scroll :])

    def move(self, to: int) -> None:
        self.cursor = min(max(to, 1), len(self.history))
        self.scroll, self.message = 0, ""

    def scroll_by(self, lines: int) -> None:
        length = len(self.lines())
        self.scroll = min(max(self.scroll + lines, 0), max(length - 1, 0))

    def goto(self, name: str) -> None:
        """The next frame (after the cursor, wrapping) of the node named, or starting so;
        a number goes to that frame.
        """
        name = name.strip()
        if name.isdigit():
            if 1 <= int(name) <= len(self.history):
                self.move(int(name))
                self.message = ""
            else:
                self.message = f"no frame {name}: frames 1 to {len(self.history)}"
            return
        for match in (lambda f: f.node == name, lambda f: (f.node or "").startswith(name)):
            found = self._next(match)
            if found is not None:
                self.move(found)
                self.message = ""
                return
        self.message = f"no frame of a node named {name!r}"

    def search(self, query: str) -> None:
        """The next frame (after the cursor, wrapping) whose text holds ``query`` (any case);
        an empty query repeats the last one.
        """
        query = query.strip() or self.last_query
        if not query:
            self.message = "type something to search for"
            return
        self.last_query = query
        needle = query.lower()
        found = self._next(lambda f: needle in self.text(f.index).lower())
        if found is None:
            self.message = f"not found: {query}"
            return
        self.move(found)
        self.message = f"/{query}: frame {found}"

    def fork(self) -> None:
        frame = self.history.frame(self.cursor)
        if frame.fork_command is None:
            self.message = f"frame {self.cursor} has no checkpoint to fork from"
            return
        if frame.fork_command not in self.fork_commands:
            self.fork_commands.append(frame.fork_command)
        self.message = f"printed on exit: {frame.fork_command}"

    def _next(self, match: Callable[[Frame], bool]) -> int | None:
        total = len(self.history)
        for step in range(1, total + 1):
            index = (self.cursor - 1 + step) % total + 1
            if match(self.history.frames[index - 1]):
                return index
        return None


def _timeline_width(columns: int) -> int:
    """The frame list's width: 26 columns, less on a narrow screen (a third of it)."""
    return min(_TIMELINE, max(12, columns // 3))


def _pane_width() -> int:
    """The frame pane's width on the running stepper's screen (not its last column)."""
    from prompt_toolkit.application import get_app

    columns = get_app().output.get_size().columns
    return columns - _timeline_width(columns) - 2


def step_through(
    history: Replay, start: int, *, input: Input | None = None, output: Output | None = None
) -> Stepper:
    """Run the full-screen stepper from frame ``start`` until q; return where it ended."""
    from prompt_toolkit.application import Application
    from prompt_toolkit.buffer import Buffer

    state = Stepper(history, start)
    query = Buffer(multiline=False)
    layout, timeline = _layout(state, query)
    app: Application[None] = Application(
        layout=layout,
        key_bindings=_keys(state, query, timeline),
        full_screen=True,
        input=input,
        output=output,
    )
    app.run()
    return state


def _layout(state: Stepper, query: Buffer) -> tuple[Layout, Window]:
    """The timeline on the left, the frame on the right, a prompt line and a status line."""
    from prompt_toolkit.application import get_app
    from prompt_toolkit.data_structures import Point
    from prompt_toolkit.filters import Condition
    from prompt_toolkit.formatted_text import StyleAndTextTuples
    from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, VSplit, Window
    from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl

    history = state.history

    def timeline() -> StyleAndTextTuples:
        rows: StyleAndTextTuples = []
        for frame in history.frames:
            mark = "✗" if frame.status == ItemStatus.REJECTED else _KIND_MARKS.get(frame.kind, " ")
            label = frame.node or frame.status or frame.kind
            if frame.kind == "decision":
                label = f"{label} {frame.status}"
            elif frame.iteration and frame.iteration > 1:
                label = f"{label} #{frame.iteration}"
            text = printable(f"{frame.index:>3} {mark} {label}")
            rows.append(("reverse" if frame.index == state.cursor else "", text))
            rows.append(("", "\n"))
        return rows[:-1]

    def status() -> str:
        keys = "n/p next/prev  g node  / search  f fork command  q quit"
        return f" {state.cursor}/{len(history)}  {state.message or keys}"

    def prompt() -> str:
        return "node or frame: " if state.mode == "goto" else "/"

    frames = Window(
        FormattedTextControl(
            timeline,
            focusable=True,
            show_cursor=False,
            get_cursor_position=lambda: Point(0, state.cursor - 1),
        ),
        width=lambda: _timeline_width(get_app().output.get_size().columns),
        wrap_lines=False,
    )
    layout = Layout(
        HSplit(
            [
                VSplit(
                    [
                        frames,
                        Window(width=1, char="│"),
                        Window(FormattedTextControl(state.body), wrap_lines=True),
                    ]
                ),
                ConditionalContainer(
                    VSplit(
                        [
                            Window(FormattedTextControl(prompt), dont_extend_width=True),
                            Window(BufferControl(query)),
                        ],
                        height=1,
                    ),
                    filter=Condition(lambda: state.mode is not None),
                ),
                Window(FormattedTextControl(status), height=1, style="reverse"),
            ]
        ),
        focused_element=frames,
    )
    return layout, frames


def _keys(state: Stepper, query: Buffer, timeline: Window) -> KeyBindings:
    """n/→ next, p/← previous, g node, / search, f fork command, q quit; PgUp/PgDn scroll."""
    from prompt_toolkit.filters import Condition
    from prompt_toolkit.key_binding import KeyBindings

    normal = Condition(lambda: state.mode is None)
    typing = Condition(lambda: state.mode is not None)
    keys = KeyBindings()

    def on(*names: str, when: Filter = normal) -> Callable[[Callable[[], None]], None]:
        def register(action: Callable[[], None]) -> None:
            for name in names:
                keys.add(name, filter=when)(lambda event: action())

        return register

    on("n", "right", "down", "j")(lambda: state.move(state.cursor + 1))
    on("p", "left", "up", "k")(lambda: state.move(state.cursor - 1))
    on("home")(lambda: state.move(1))
    on("end", "G")(lambda: state.move(len(state.history)))
    on("pagedown", "space")(lambda: state.scroll_by(10))
    on("pageup")(lambda: state.scroll_by(-10))
    on("f")(state.fork)

    def ask(mode: str, event: KeyPressEvent) -> None:
        state.mode, state.message = mode, ""
        query.reset()
        event.app.layout.focus(query)

    keys.add("g", filter=normal)(lambda event: ask("goto", event))
    keys.add("/", filter=normal)(lambda event: ask("search", event))

    @keys.add("enter", filter=typing)
    def _accept(event: KeyPressEvent) -> None:
        text, mode = query.text, state.mode
        state.mode = None
        event.app.layout.focus(timeline)
        if mode == "goto":
            state.goto(text)
        else:
            state.search(text)

    @keys.add("escape", filter=typing, eager=True)
    @keys.add("c-g", filter=typing)
    def _cancel(event: KeyPressEvent) -> None:
        state.mode, state.message = None, ""
        event.app.layout.focus(timeline)

    @keys.add("q", filter=normal)
    @keys.add("c-d", filter=normal)
    @keys.add("c-c")
    def _quit(event: KeyPressEvent) -> None:
        event.app.exit()

    return keys
