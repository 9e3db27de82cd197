"""The interactive ``shep inbox``: pick a pending item, decide it, resume its run, repeat.

A decision goes through the same commands as ``shep answer``, ``approve`` and
``reject``: the first decision of an item wins, and one that lost the race
(another terminal, the supervisor, a deadline) is said in one line while the
picker goes on with the list as it is now. prompt-toolkit is imported only
inside the functions here (it costs ~0.15 s that ``shep status`` must not pay);
``input``/``output`` let tests drive the picker through a pipe input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import click

from events.display import printable
from events.inbox_status import ItemKind
from shep.cli.render import wrapped
from shep.home.runtime import Runtime

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import StyleAndTextTuples
    from prompt_toolkit.input import Input
    from prompt_toolkit.layout.dimension import Dimension
    from prompt_toolkit.output import Output

Row = dict[str, Any]

#: A menu entry's value meaning "back to the list"; no option id has a NUL in it.
_BACK = "\0back"
#: The question menu's entry for typing an answer instead of picking an option.
_FREE_TEXT = "\0free-text"
_LIST_KEYS = "up/down or j/k move, Enter opens, q quits"
_ITEM_KEYS = "up/down or j/k move, Enter chooses, Esc goes back, q quits"


def pick_and_decide(
    runtime: Runtime,
    items: Sequence[Row],
    *,
    input: Input | None = None,
    output: Output | None = None,
) -> None:
    """Show the pending ``items`` (oldest first) and decide them one by one, until none is left.

    Keys in the list: up/down or j/k move, Enter opens the item, q (Esc,
    Ctrl-C, Ctrl-D) quits. An opened question offers its options, the
    recommended one preselected, and a free-text answer when the question
    allows it; a gate offers approve (with an optional comment) and reject
    (a reason is required: an empty one is refused). Each decision is
    confirmed (Enter or y; n records nothing), recorded, its run resumed in
    the background, and one line on stdout says what was recorded; then the
    list is read again. Quitting records nothing and returns normally.
    """
    terminal = _Terminal(input, output)
    pending = list(items)
    selected = pending[0]["item_id"] if pending else ""
    try:
        while pending:
            selected = terminal.choose(
                f"Inbox: {len(pending)} waiting ({_LIST_KEYS})",
                _list_entries(pending, datetime.now(UTC)),
                default=_index_of(pending, selected),
                back_quits=True,
            )
            item = next(i for i in pending if i["item_id"] == selected)
            _open(runtime, terminal, item)
            position = _index_of(pending, selected)
            pending = _pending(runtime)
            if pending and not any(i["item_id"] == selected for i in pending):
                # The item was decided: the cursor stays on the row that took its place.
                selected = pending[min(position, len(pending) - 1)]["item_id"]
    except (KeyboardInterrupt, EOFError):
        return
    click.echo("The inbox is empty.")


@dataclass(frozen=True)
class _Decision:
    """A decision the user made but has not confirmed: what to ask, and how to record it."""

    confirm: str
    #: Records it; returns the line to show, and whether the run can go on now.
    record: Callable[[], tuple[str, bool]]


def _open(runtime: Runtime, terminal: _Terminal, item: Row) -> None:
    """Ask for the item's decision; once confirmed, record it and resume its run."""
    from events.errors import ShepError
    from shep.cli.run import render
    from shep.runs.decisions import check_workflow, resume_after_decision

    if item["kind"] == ItemKind.QUESTION:
        decision = _ask_answer(runtime, terminal, item)
    else:
        decision = _ask_approval(runtime, terminal, item)
    if decision is None:
        return
    if not terminal.confirm(decision.confirm):
        click.echo("Nothing recorded.")
        return
    try:
        check_workflow(runtime, item["item_id"])
        line, decided = decision.record()
        click.echo(line)
    except ShepError as e:
        # Lost the race (AlreadyDecidedError), or the run ended meanwhile: say so, go on.
        click.echo(f"shep: {e}", err=True)
        return
    if not decided:
        return
    try:
        render(resume_after_decision(runtime, item["run_id"], wait=False), quiet=True)
    except ShepError as e:
        # The decision is in the log: the next shep command starts the worker that missed.
        click.echo(f"shep: {e}", err=True)


def _ask_answer(runtime: Runtime, terminal: _Terminal, item: Row) -> _Decision | None:
    from commands.answer_question import answer_question
    from shep.home.identity import user_actor

    options: list[Row] = item["options"]
    entries = [(str(o["id"]), _option_label(o)) for o in options]
    if item["free_text"]:
        entries.append((_FREE_TEXT, "Type an answer..."))
    entries.append((_BACK, "Back to the list"))
    recommended = next((n for n, o in enumerate(options) if o["recommended"]), 0)
    choice = terminal.choose(
        _describe(item, datetime.now(UTC)), entries, default=recommended, numbered=True
    )
    if choice == _BACK:
        return None
    short = item["item_id"][:8]
    where = f"{item['node']} of run {item['run_id'][:8]}"
    item_id = UUID(item["item_id"])
    if choice == _FREE_TEXT:
        text = terminal.ask_text(
            f"{printable(item['prompt'])}\nYour answer: ", required="The answer cannot be empty."
        )
        option_id, shown = None, text
    else:
        text, option_id = None, choice
        shown = next(printable(o["label"]) for o in options if o["id"] == choice)

    def record() -> tuple[str, bool]:
        # "Type an answer..." was chosen: what was typed is free text, even "1".
        state = answer_question(
            runtime.store(),
            item_id,
            actor=user_actor(),
            text=text,
            option_id=option_id,
            as_text=text is not None,
        )
        recorded = getattr(state.decision, "answer", shown)
        return f"Answered {short}: {printable(recorded)} ({where}).", True

    return _Decision(f"Answer {short} ({where}) with {shown!r}? [Y/n] ", record)


def _ask_approval(runtime: Runtime, terminal: _Terminal, item: Row) -> _Decision | None:
    from commands.reject_item import reject_item
    from shep.home.identity import user_actor

    phase = item["phase"] or item["node"]
    choice = terminal.choose(
        _describe(item, datetime.now(UTC)),
        [
            ("approve", "Approve: the run goes on"),
            ("reject", f"Reject with a reason: {phase} runs again, the agent gets the reason"),
            (_BACK, "Back to the list"),
        ],
        default=0,
        numbered=True,
    )
    if choice == _BACK:
        return None
    short, run_short = item["item_id"][:8], item["run_id"][:8]
    item_id = UUID(item["item_id"])
    if choice == "approve":
        comment = terminal.ask_text("Comment for the record (optional): ")

        def approve() -> tuple[str, bool]:
            from shep.runs.decisions import record_approval

            approval = record_approval(runtime, item, actor=user_actor(), comment=comment)
            return approval.line, approval.decided

        return _Decision(f"Approve {item['node']} of run {run_short}? [Y/n] ", approve)
    reason = terminal.ask_text(
        "Reason (the agent gets it): ", required="A rejection needs a reason: the agent gets it."
    )

    def reject() -> tuple[str, bool]:
        reject_item(runtime.store(), item_id, actor=user_actor(), reason=reason)
        _warn_rejections(runtime, item["run_id"], phase)
        return f"Rejected {short}: {phase} of run {run_short} runs again with your reason.", True

    return _Decision(
        f"Reject {item['node']} of run {run_short} ({phase} runs again)? [Y/n] ", reject
    )


def _warn_rejections(runtime: Runtime, run_id: str, phase: str) -> None:
    """The same warning as ``shep reject`` when a phase keeps being rejected."""
    from projections.inbox_queries import count_rejections
    from shep.runs.decisions import REJECTION_WARNING

    conn = runtime.read_db()
    _catch_up(conn)
    count = count_rejections(conn, run_id, phase)
    if count >= REJECTION_WARNING:
        click.echo(
            f"shep: warning: {phase} of run {run_id[:8]} has been rejected {count} "
            "times; consider `shep cancel` or a clearer reason.",
            err=True,
        )


def _pending(runtime: Runtime) -> list[Row]:
    """The inbox as the log says now (other processes decide and ask meanwhile)."""
    from projections.inbox_queries import list_inbox

    conn = runtime.read_db()
    _catch_up(conn)
    return list_inbox(conn)


def _catch_up(conn: Any) -> None:
    from projections.catch_up import catch_up

    if not conn.readonly("main"):
        catch_up(conn)


def _index_of(items: Sequence[Row], item_id: str) -> int:
    return next((n for n, i in enumerate(items) if i["item_id"] == item_id), 0)


def _list_entries(items: Sequence[Row], now: datetime) -> list[tuple[str, str]]:
    """One aligned row per item: kind, run, workflow, node #iteration, age, what is asked."""
    from shep.cli.render import age

    cells = [
        (
            item["kind"],
            item["run_id"][:8],
            printable(item["workflow"]),
            printable(item["node"]) + (f" #{item['iteration']}" if item["iteration"] > 1 else ""),
            age(item["asked_at"], now),
            printable(item["prompt"]).split("\n", 1)[0],
        )
        for item in items
    ]
    widths = [max(len(row[c]) for row in cells) for c in range(5)]
    return [
        (
            item["item_id"],
            "  ".join([*(c.ljust(w) for c, w in zip(row[:5], widths, strict=True)), row[5]]),
        )
        for item, row in zip(items, cells, strict=True)
    ]


def _describe(item: Row, now: datetime) -> str:
    """The opened item: where it comes from, what is asked, the files, the deadline."""
    from shep.cli.render import age

    iteration = f" #{item['iteration']}" if item["iteration"] > 1 else ""
    lines = [
        f"{item['kind']} {item['item_id'][:8]}, run {item['run_id'][:8]} "
        f"({printable(item['workflow'])}), {printable(item['node'])}{iteration}, "
        f"asked {age(item['asked_at'], now)} ago",
        printable(item["prompt"]),
    ]
    if item["context"]:
        lines.append(printable(item["context"]))
    for artifact in item["artifacts"]:
        kind = artifact.get("kind", "file")
        lines.append(f"{kind} {printable(artifact['path'])}  sha256 {artifact['sha256'][:12]}")
    if item["deadline"]:
        lines.append(f"The recommended option applies at {item['deadline'][:19]} UTC.")
    lines.append(f"repo {printable(item['repo'])}")
    lines.append(f"({_ITEM_KEYS})")
    return "\n".join(lines)


def _option_label(option: Row) -> str:
    label = printable(option["label"])
    if option["recommended"]:
        label += " (recommended)"
    if option["description"]:
        label += f": {printable(option['description'])}"
    return label


class _Menu:
    """A menu's header and entries as the screen shows them: wrapped at words to its
    width when drawn (the width is the running application's), the entry under the
    cursor marked.
    """

    def __init__(
        self, header: str, entries: Sequence[tuple[str, str]], numbered: bool, default: int
    ) -> None:
        self.title, self.entries, self.numbered = header, entries, numbered
        self.cursor = [min(max(default, 0), len(entries) - 1)]

    @staticmethod
    def width() -> int:
        from prompt_toolkit.application import get_app

        # Not the last column: a terminal may wrap there on its own.
        return max(get_app().output.get_size().columns - 1, 8)

    def header(self) -> str:
        return "\n".join(wrapped(self.title, self.width()))

    def entry(self, n: int) -> list[str]:
        """Entry ``n``'s lines: its label wrapped at words under its first line."""
        number = f"{n + 1}. " if self.numbered and n < 9 else "   " if self.numbered else ""
        pad = " " * (2 + len(number))
        lines = wrapped(self.entries[n][1], self.width() - len(pad))
        mark = "> " if n == self.cursor[0] else "  "
        return [mark + number + lines[0], *(pad + line for line in lines[1:])]

    def rows(self) -> StyleAndTextTuples:
        fragments: StyleAndTextTuples = []
        for n in range(len(self.entries)):
            style = "reverse" if n == self.cursor[0] else ""
            fragments += [(style, "\n".join(self.entry(n))), ("", "\n")]
        return fragments[:-1]

    def first_line(self, of: int) -> int:
        return sum(len(self.entry(n)) for n in range(of))

    def height(self) -> Dimension:
        from prompt_toolkit.layout.dimension import Dimension

        # A word wider than the screen still takes the rows it runs over.
        columns = self.width() + 1
        total = sum(
            -(-max(len(line), 1) // columns)
            for n in range(len(self.entries))
            for line in self.entry(n)
        )
        return Dimension(min=1, preferred=total, max=total)


class _Terminal:
    """The picker's menus and prompts, all on one input and output."""

    def __init__(self, input: Input | None, output: Output | None) -> None:
        self.input = input
        self.output = output

    def choose(
        self,
        header: str,
        entries: Sequence[tuple[str, str]],
        *,
        default: int = 0,
        numbered: bool = False,
        back_quits: bool = False,
    ) -> str:
        """The value of the entry chosen with Enter; ``_BACK`` for Esc or left.

        q and Ctrl-D raise ``EOFError``, Ctrl-C ``KeyboardInterrupt``; with
        ``back_quits`` (the list itself), Esc quits too. The menu is erased
        once answered: what was decided is said by the lines that follow.
        """
        from prompt_toolkit.application import Application
        from prompt_toolkit.data_structures import Point
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
        from prompt_toolkit.layout import HSplit, Layout, Window
        from prompt_toolkit.layout.controls import FormattedTextControl

        shown = _Menu(header, entries, numbered, default)
        cursor = shown.cursor

        keys = KeyBindings()

        def move(to: int) -> None:
            cursor[0] = min(max(to, 0), len(entries) - 1)

        @keys.add("up")
        @keys.add("k")
        @keys.add("c-p")
        def _up(event: KeyPressEvent) -> None:
            move(cursor[0] - 1)

        @keys.add("down")
        @keys.add("j")
        @keys.add("c-n")
        def _down(event: KeyPressEvent) -> None:
            move(cursor[0] + 1)

        @keys.add("home")
        @keys.add("g")
        def _first(event: KeyPressEvent) -> None:
            move(0)

        @keys.add("end")
        @keys.add("G")
        def _last(event: KeyPressEvent) -> None:
            move(len(entries) - 1)

        if numbered:
            for n in range(min(len(entries), 9)):

                @keys.add(str(n + 1))
                def _number(event: KeyPressEvent, n: int = n) -> None:
                    move(n)

        @keys.add("enter")
        def _choose(event: KeyPressEvent) -> None:
            event.app.exit(result=entries[cursor[0]][0])

        @keys.add("escape", eager=True)
        def _escape(event: KeyPressEvent) -> None:
            if back_quits:
                event.app.exit(exception=EOFError())
            else:
                event.app.exit(result=_BACK)

        if not back_quits:

            @keys.add("left")
            def _back(event: KeyPressEvent) -> None:
                event.app.exit(result=_BACK)

        @keys.add("q")
        @keys.add("c-d")
        def _quit(event: KeyPressEvent) -> None:
            event.app.exit(exception=EOFError())

        @keys.add("c-c")
        @keys.add("<sigint>")
        def _interrupt(event: KeyPressEvent) -> None:
            event.app.exit(exception=KeyboardInterrupt())

        menu = FormattedTextControl(
            shown.rows,
            focusable=True,
            show_cursor=False,
            get_cursor_position=lambda: Point(0, shown.first_line(cursor[0])),
        )
        # What a person decides on is never cut at the screen's edge: wrapped at words,
        # and a word wider than the screen runs over onto the next row.
        layout = Layout(
            HSplit(
                [
                    Window(
                        FormattedTextControl(shown.header),
                        dont_extend_height=True,
                        wrap_lines=True,
                    ),
                    Window(menu, height=shown.height, wrap_lines=True),
                ]
            ),
            focused_element=menu,
        )
        app: Application[str] = Application(
            layout=layout,
            key_bindings=keys,
            full_screen=False,
            erase_when_done=True,
            input=self.input,
            output=self.output,
        )
        return app.run()

    def ask_text(self, message: str, *, required: str | None = None) -> str:
        """A line of text, stripped; with ``required``, an empty one is refused with that."""
        from prompt_toolkit.validation import Validator

        validator = None
        if required is not None:
            validator = Validator.from_callable(
                lambda text: bool(text.strip()), error_message=required, move_cursor_to_end=True
            )
        return self._session().prompt(message, validator=validator).strip()

    def confirm(self, message: str) -> bool:
        """Yes for Enter, y or yes; no for n or no; anything else is asked again."""
        from prompt_toolkit.validation import Validator

        answer = self._session().prompt(
            message,
            validator=Validator.from_callable(
                lambda text: text.strip().lower() in ("", "y", "yes", "n", "no"),
                error_message="Answer y or n.",
                move_cursor_to_end=True,
            ),
        )
        return answer.strip().lower() in ("", "y", "yes")

    def _session(self) -> PromptSession[str]:
        # A fresh session per prompt: a session keeps the validator of its last prompt.
        from prompt_toolkit import PromptSession

        return PromptSession(input=self.input, output=self.output)
