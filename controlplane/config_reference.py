"""docs/config-reference.md from the pydantic models of :mod:`controlplane.config`.

Goal: one reference of every key of ``guardian.toml`` that cannot drift from what the service accepts.
Method: walk :class:`~controlplane.config.Settings` field by field; a nested model is a TOML table
(``[raft]``), a list of models an array of tables (``[[tokens]]``), a dict of models a table per key
(``[throttle.thresholds.<hdd|ssd|nvme>]``); each key's row gives its type, default, constraints (from
the field's annotated metadata) and description (the field's docstring, else the model's). Guarantee:
deterministic output; ``tests/unit/test_config_reference.py`` fails when the committed file differs
(regenerate: ``python -m controlplane.config_reference > docs/config-reference.md``). Cost: O(fields).
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from controlplane.config import Settings

HEADER = """# Configuration reference (`guardian.toml`)

Generated from the pydantic models of `controlplane/config.py` by
`python -m controlplane.config_reference > docs/config-reference.md`; do not edit by hand (a unit test
fails when this file and the models differ). A complete example is `deploy/guardian.toml`. Unknown keys
are refused (the error names the key as a JSON path); durations are seconds unless the name says `_ms`.
"""


def _model(tp: Any) -> type[BaseModel] | None:
    return tp if inspect.isclass(tp) and issubclass(tp, BaseModel) else None


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _type_name(get_args(tp)[0])
    if origin is Literal:
        return " \\| ".join(f'`"{a}"`' if isinstance(a, str) else f"`{a}`" for a in get_args(tp))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        return f"list of {_type_name(get_args(tp)[0])}"
    if origin is dict:
        k, v = get_args(tp)
        return f"table {_type_name(k)} → {_type_name(v)}"
    if tp is type(None):
        return "unset"
    if tp is Path:
        return "path"
    model = _model(tp)
    if model is not None:
        return f"table ({model.__name__})"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(tp, getattr(tp, "__name__", str(tp)))


def _constraints(field: FieldInfo) -> str:
    parts: list[str] = []
    metadata = list(field.metadata)
    for arg in get_args(field.annotation):  # Optional[Annotated[...]]: the constraints sit inside
        if get_origin(arg) is typing.Annotated:
            metadata += [m for a in get_args(arg)[1:] for m in (getattr(a, "metadata", None) or [a])]
    names = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "min length", "max_length": "max length",
             "pattern": "pattern"}
    for m in metadata:
        for attr, label in names.items():
            value = getattr(m, attr, None)
            if value is not None:
                parts.append(f"{label} `{value}`" if attr == "pattern" else f"{label} {value}")
    return ", ".join(parts)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(table)"
        return f"`{value!r}`" if value not in ([], {}) else "empty"
    if field.default is PydanticUndefined:
        return "**required**"
    if field.default is None:
        return "unset"
    value = field.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str | Path):
        return f'`"{value}"`'
    return f"`{value}`"


def _doc(model: type[BaseModel]) -> str:
    doc = inspect.cleandoc(model.__doc__ or "")  # the model's own docstring, not BaseModel's
    return " ".join(doc.split())


def _section(title: str, model: type[BaseModel], out: list[str]) -> list[tuple[str, type[BaseModel]]]:
    """Write one table's keys; return its nested tables as (title, model)."""
    nested: list[tuple[str, type[BaseModel]]] = []
    out.append(f"\n## {title}\n\n")
    if _doc(model) and model is not Settings:
        out.append(_doc(model) + "\n\n")
    rows = ["| key | type | default | constraints | description |", "| --- | --- | --- | --- | --- |"]
    prefix = title.strip("[]") if title.startswith("[") else ""
    for name, field in model.model_fields.items():
        tp = field.annotation
        sub = _model(tp)
        args = get_args(tp)
        if sub is not None:
            nested.append((f"[{prefix + '.' if prefix else ''}{name}]", sub))
            continue
        if get_origin(tp) is list and args and _model(args[0]) is not None:
            nested.append((f"[[{prefix + '.' if prefix else ''}{name}]]", args[0]))
            continue
        if get_origin(tp) is dict and args and _model(args[1]) is not None:
            keys = "\\|".join(str(k) for k in get_args(args[0])) or "key"
            nested.append((f"[{prefix + '.' if prefix else ''}{name}.<{keys}>]", args[1]))
            continue
        desc = " ".join((field.description or "").split())
        rows.append(f"| `{name}` | {_type_name(tp)} | {_default(field)} | {_constraints(field)} | {desc} |")
    if len(rows) > 2:
        out.append("\n".join(rows) + "\n")
    return nested


def reference() -> str:
    """The whole reference as Markdown."""
    out = [HEADER]
    queue: list[tuple[str, type[BaseModel]]] = [("Top level", Settings)]
    while queue:
        title, model = queue.pop(0)
        queue[0:0] = _section(title, model, out)
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(reference())
