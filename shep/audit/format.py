"""What a line of an audit export is: the format, the kinds, the columns, and the audit
fields of a question, a gate and a decision (who, what, on which item, run and node, under
which policy, and the sha256 of what the decider was shown).

The writer (``shep.audit.export``) and the offline verifier (``shep.audit.verify_export``)
share it, so that the fields an export states are the fields its verifier recomputes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec

from events.catalog import topic_of
from events.chain import GENESIS_HASH
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalVoted,
    QuestionAnswered,
    QuestionAsked,
)
from events.inbox_status import DECISION_VERDICTS, ItemStatus
from events.supervisor import SupervisorDecisionMade, SupervisorDecisionRefused

FORMAT = "shep-audit-export/1"
KINDS = ("all", "decisions", "approvals")
#: Fields of a decision's event that ``write_csv`` gives columns of their own (the JSONL
#: line has them in ``event``): the supervisor's evidence, whether the decision decided the
#: item, the decision a user's replaced, a cosigned approval's other approver, and who had
#: decided an item the supervisor could not decide.
DETAIL_FIELDS = (
    "model", "confidence", "rules", "acted", "advice", "overrides", "cosigned_by", "decided_by",
)  # fmt: skip
#: The columns of ``write_csv``, in order.
CSV_COLUMNS = (
    "position", "at", "stream", "version", "topic", "run", "item", "node", "actor", "verdict",
    "answer", "reason", "policy", "prompt_version", "seen_hash", "chain_hash", *DETAIL_FIELDS,
)  # fmt: skip

QUESTION_ASKED = topic_of(QuestionAsked)
APPROVAL_REQUESTED = topic_of(ApprovalRequested)
ASKED = (QUESTION_ASKED, APPROVAL_REQUESTED)
SUPERVISOR_MADE = topic_of(SupervisorDecisionMade)
SUPERVISOR_REFUSED = topic_of(SupervisorDecisionRefused)
#: Decisions on the supervisor's stream of a run: their item is their ``subject_id``.
SUPERVISED = (SUPERVISOR_MADE, SUPERVISOR_REFUSED)
#: Every decision's topic and its verdict (None: the event's own ``decision``).
VERDICTS: dict[str, str | None] = {
    topic_of(cls): DECISION_VERDICTS.get(cls.__name__)
    for cls in (
        QuestionAnswered,
        ApprovalGranted,
        ApprovalRejected,
        ApprovalVoted,
        SupervisorDecisionMade,
        SupervisorDecisionRefused,
    )
}
DECIDED = tuple(VERDICTS)
AUDITED = frozenset((*ASKED, *DECIDED))
#: Decisions on a gate's own stream.
GATE_DECIDED = (topic_of(ApprovalGranted), topic_of(ApprovalRejected), topic_of(ApprovalVoted))
#: What the inbox shows a decider of each kind of item: ``seen_hash`` covers these fields.
SEEN_FIELDS = {
    QUESTION_ASKED: ("question", "choices", "options", "context", "free_text", "deadline"),
    APPROVAL_REQUESTED: ("summary", "phase", "artifacts"),
}
GENESIS_HEX = GENESIS_HASH.hex()


class Json:
    """Decoding that notes floats, and the canonical encoding.

    msgspec writes what ``json.dumps(sort_keys=True)`` writes, several times
    faster, except for some floats (``1e16`` against ``1e+16``): a value that
    held a float is encoded with ``json.dumps`` instead.
    """

    def __init__(self) -> None:
        self.floats = False
        self._decoder = msgspec.json.Decoder(float_hook=self._float)
        #: The canonical encoding of a value that holds no float.
        self.encode_sorted = msgspec.json.Encoder(order="sorted").encode

    def _float(self, text: str) -> float:
        self.floats = True
        return float(text)

    def decode(self, data: bytes) -> Any:
        return self._decoder.decode(data)

    def encode(self, value: Any, *, floats: bool) -> bytes:
        if floats:
            return json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode()
        return self.encode_sorted(value)


def canonical(value: Any) -> bytes:
    """The canonical JSON of ``value``: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def hex_id(value: Any) -> str | None:
    """A UUID as the log stores stream ids (32 hex digits)."""
    return value.replace("-", "") if isinstance(value, str) else None


#: An item's run, node, ``seen_hash`` and prompt version, from its question or gate.
Asked = tuple[str | None, str | None, str, str | None]


def asked_of(topic: str, event: Any) -> Asked:
    """An item's run, node, ``seen_hash`` and prompt version, from its question or gate."""
    if not isinstance(event, dict):
        return None, None, hashlib.sha256(canonical(None)).hexdigest(), None
    seen = {key: event[key] for key in SEEN_FIELDS[topic] if key in event}
    node = event.get("node")
    version = event.get("prompt_version")
    return (
        hex_id(event.get("run_id")),
        node if isinstance(node, str) else None,
        hashlib.sha256(canonical(seen)).hexdigest(),
        version if isinstance(version, str) else None,
    )


def item_of(topic: str, stream: str, event: Any) -> str | None:
    """The question or gate an event is about: its stream, or a supervisor decision's subject."""
    if topic in SUPERVISED:
        return hex_id(event.get("subject_id")) if isinstance(event, dict) else None
    return stream


def about(topic: str, stream: str, event: Any, asked: Asked | None) -> dict[str, Any]:
    """The audit fields of a question, a gate, or a decision (``asked``: its item's)."""
    fields = event if isinstance(event, dict) else {}
    if topic in SUPERVISED:
        return about_supervisor(topic, fields, asked)
    about: dict[str, Any] = {"item": stream}
    if topic in ASKED:
        asked = asked_of(topic, event)
    else:
        about["actor"] = fields.get("actor")
        about["verdict"] = verdict = VERDICTS[topic]
        if verdict == ItemStatus.ANSWERED:
            about["answer"] = fields.get("answer")
        else:
            about["reason"] = fields.get("rationale", "")
    run, node, seen, prompt_version = asked or (None, None, None, None)
    run = hex_id(fields.get("run_id")) or run
    node = fields.get("node") or node
    if run is not None:
        about["run"] = run
    if node is not None:
        about["node"] = node
    if seen is not None:
        about["seen_hash"] = seen
    if fields.get("policy") is not None:
        about["policy"] = fields["policy"]
    prompt_version = fields.get("prompt_version") or prompt_version
    if prompt_version is not None:
        about["prompt_version"] = prompt_version
    return about


def about_supervisor(topic: str, fields: dict[str, Any], asked: Asked | None) -> dict[str, Any]:
    """A supervisor decision's audit fields, from the event alone but for its item's node.

    Its actor and policy are its policy version (``supervisor:global@3``); its
    ``seen_hash`` is the sha256 of exactly what it decided on (``input_hash``),
    not of what the inbox shows a person. A refused decision (a user decided
    first) has the verdict ``refused``; who decided is in the event.
    """
    version = fields.get("policy_version")
    about: dict[str, Any] = {
        "actor": f"supervisor:{version}" if isinstance(version, str) else "supervisor"
    }
    item = hex_id(fields.get("subject_id"))
    if item is not None:
        about["item"] = item
    if topic == SUPERVISOR_REFUSED:
        about["verdict"] = "refused"
        about["reason"] = fields.get("reason", "")
    else:
        about["verdict"] = fields.get("decision")
        about["reason"] = fields.get("rationale", "")
        if fields.get("answer") is not None:
            about["answer"] = fields["answer"]
        if isinstance(fields.get("input_hash"), str) and fields["input_hash"]:
            about["seen_hash"] = fields["input_hash"]
        if fields.get("prompt_version") is not None:
            about["prompt_version"] = fields["prompt_version"]
    run = hex_id(fields.get("run_id"))
    if run is not None:
        about["run"] = run
    if asked is not None and asked[1] is not None:
        about["node"] = asked[1]
    if version is not None:
        about["policy"] = version
    return about
