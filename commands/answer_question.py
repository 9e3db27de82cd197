"""Answer a question: one of its options, or free text."""

from __future__ import annotations

from uuid import UUID

from commands.inbox_state import ItemState, append_decision, load_item
from events.errors import InvalidAnswerError
from events.inbox import QuestionAnswered, QuestionAsked
from events.store import EventStore


def answer_question(
    store: EventStore,
    item_id: UUID,
    *,
    actor: str,
    text: str | None = None,
    option_id: str | None = None,
    as_text: bool = False,
) -> ItemState:
    """Record the answer (an option's id, or free text); the first decision wins.

    ``text`` that names one of the question's options (its id, as the inbox shows
    it, or its label) is that option, unless ``as_text``: then it is free text as
    typed.
    """
    asked = load_item(store, item_id)
    if asked is not None and isinstance(asked.asked, QuestionAsked):
        question = asked.asked
        if option_id is None and text is not None and not as_text:
            named = question.option_named(text)
            option_id = named.id if named is not None else None
        if option_id is not None:
            labels = {o.id: o.label for o in question.offered()}
            if option_id not in labels:
                raise InvalidAnswerError(
                    f"Question {item_id.hex[:8]} has no option {option_id!r}; its options are "
                    f"{', '.join(labels)}."
                )
            text = labels[option_id]
        elif not (text or "").strip():
            raise InvalidAnswerError("The answer is empty; give text or --option ID.")
        elif not question.free_text:
            raise InvalidAnswerError(
                f"Question {item_id.hex[:8]} takes one of its options: --option ID."
            )
    state, _ = append_decision(
        store,
        item_id,
        QuestionAnswered,
        "question",
        answer=(text or "").strip(),
        actor=actor,
        option_id=option_id,
    )
    return state
