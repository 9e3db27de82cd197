"""The workflow state in a replay: checkpoints decoded without LangGraph, and the
change from one to the next.

Checkpoints are decoded with ``ormsgpack`` alone (imported only when a state
is shown): importing LangGraph would cost a second and could run code named in
the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from events.checkpoints import CheckpointSaved

#: Values (in a state diff, and a decision's answer in its title) are cut here, with an ellipsis.
VALUE_LIMIT = 80
#: A state diff names at most this many keys; the rest are counted.
DIFF_LIMIT = 40
#: Dicts in the state are compared this deep (``results.draft``, ``answers.scope``).
DIFF_DEPTH = 2


class StateDiff(msgspec.Struct, kw_only=True):
    """How the workflow state changed: keys (dotted into dicts) with short values."""

    added: dict[str, str] = {}
    removed: dict[str, str] = {}
    changed: dict[str, tuple[str, str]] = {}
    #: Changed keys left out beyond ``DIFF_LIMIT``.
    omitted: int = 0


def checkpoint_state(event: CheckpointSaved) -> dict[str, Any]:
    """The workflow state a checkpoint holds: its channel values, LangGraph's own channels
    (``__start__``, ``branch:to:...``) left out. Values of types this module does not
    know are rendered as readable placeholders; nothing is imported or constructed.
    """
    value = decode_typed(event.checkpoint_type, event.checkpoint)
    values = value.get("channel_values") if isinstance(value, dict) else None
    if not isinstance(values, dict):
        return {}
    return {
        key: item
        for key, item in values.items()
        if isinstance(key, str) and not key.startswith("__") and ":" not in key
    }


def decode_typed(type_tag: str, data: bytes) -> Any:
    """A value as LangGraph's serializer wrote it (``dumps_typed``), decoded without it."""
    if type_tag == "null":
        return None
    if type_tag == "msgpack":
        import ormsgpack  # a LangGraph dependency; imported only when a state is shown

        return ormsgpack.unpackb(data, ext_hook=_readable_ext, option=ormsgpack.OPT_NON_STR_KEYS)
    if type_tag == "json":
        return msgspec.json.decode(data)
    if type_tag in ("bytes", "bytearray"):
        return f"<{len(data)} bytes>"
    # pickle above all: loading it would run code from the log.
    return f"<{type_tag} value, {len(data)} bytes, not decoded>"


#: LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus).
_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD = 0, 1, 2, 3
_EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2, _EXT_NUMPY, _EXT_DELTA = 4, 5, 6, 7


def _readable_ext(code: int, data: bytes) -> Any:
    """An extension value as plain data: a UUID's hex, a datetime's ISO text, a model's
    fields, a set's items; for anything else a placeholder naming it.
    """
    import ormsgpack

    def unpack(raw: bytes) -> Any:
        return ormsgpack.unpackb(raw, ext_hook=_readable_ext, option=ormsgpack.OPT_NON_STR_KEYS)

    try:
        if code == _EXT_DELTA:
            return unpack(data)
        if code == _EXT_NUMPY:
            return "<numpy array>"
        if code in (_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD) or code in (
            _EXT_PYDANTIC_V1,
            _EXT_PYDANTIC_V2,
        ):
            module, name, arg = unpack(data)[:3]
            if code in (_EXT_SINGLE_ARG, _EXT_METHOD):
                return list(arg) if isinstance(arg, list | tuple) else arg
            if code == _EXT_POS_ARGS:
                if name.endswith("Path") and isinstance(arg, list | tuple):
                    return "/".join(str(p) for p in arg).replace("//", "/")
                return f"<{module}.{name}{tuple(arg) if isinstance(arg, list) else (arg,)}>"
            if isinstance(arg, dict):
                return {"_type": f"{module}.{name}", **{str(k): v for k, v in arg.items()}}
            return f"<{module}.{name}>"
    except Exception:  # noqa: S110 - malformed: falls through to the placeholder
        pass
    return f"<ext type {code}, {len(data)} bytes>"


def diff_state(before: Mapping[str, Any], after: Mapping[str, Any]) -> StateDiff:
    """Keys added, removed and changed from ``before`` to ``after``, dotted into nested dicts
    (``DIFF_DEPTH`` deep), each with a short rendering of its value.
    """
    diff = StateDiff()
    entries = 0

    def room() -> bool:
        nonlocal entries
        entries += 1
        if entries > DIFF_LIMIT:
            diff.omitted += 1
            return False
        return True

    def walk(prefix: str, old: Mapping[Any, Any], new: Mapping[Any, Any], depth: int) -> None:
        for key, value in new.items():
            path = f"{prefix}{key}"
            if key not in old:
                if room():
                    diff.added[path] = short_value(value)
            elif old[key] != value:
                if isinstance(value, dict) and isinstance(old[key], dict) and depth < DIFF_DEPTH:
                    walk(f"{path}.", old[key], value, depth + 1)
                elif room():
                    diff.changed[path] = _changed(old[key], value)
        for key, value in old.items():
            if key not in new and room():
                diff.removed[f"{prefix}{key}"] = short_value(value)

    walk("", before, after, 1)
    return diff


_value_encoder = msgspec.json.Encoder(enc_hook=str)
#: Characters of a changed text kept before the first place it differs.
_CONTEXT = 12


def _changed(old: Any, new: Any) -> tuple[str, str]:
    """Both values short; texts that share a long beginning are shown from where they part."""
    if isinstance(old, str) and isinstance(new, str):
        same = 0
        for a, b in zip(old, new, strict=False):
            if a != b:
                break
            same += 1
        if same > 2 * _CONTEXT and max(len(old), len(new)) > VALUE_LIMIT - 2:
            start = same - _CONTEXT
            return short_value("…" + old[start:]), short_value("…" + new[start:])
    return short_value(old), short_value(new)


def short_value(value: Any, limit: int = VALUE_LIMIT) -> str:
    """``value`` as compact JSON, cut to ``limit`` characters with an ellipsis."""
    try:
        text = _value_encoder.encode(value).decode()
    except (TypeError, ValueError, msgspec.EncodeError):
        text = repr(value)
    return cut_text(text, limit)


def cut_text(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
