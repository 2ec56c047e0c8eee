"""An option set declared once as a dataclass and given to any number of Typer commands.

Goal: commands that share options (``exec run|drain|restore``; ``snapshot take`` and the executing
commands share how to reach a cluster) declare them once, so adding one (e.g. a Kafka security flag)
is one field, not several edited signatures.
Method: an option set is a frozen dataclass whose fields carry their Typer declaration
(``Annotated[type, typer.Option(...)]``) and their default. :func:`option_set` turns it into a
decorator that gives a command the signature Typer reads: the ``leading`` fields first, then the
command's own parameters, then every other field (in field order); at call time it gathers the shared
values into one record and passes it as the command's first argument.
Guarantee: every decorated command accepts exactly the fields of the record, with the same names,
flags, bounds and defaults; a command that redeclares a shared option is refused at import.
Cost: one signature rewrite per command at import.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import MISSING, fields
from typing import Any, get_type_hints


def shared_parameters(record: type) -> list[inspect.Parameter]:
    """The Typer parameters of an option-set dataclass, in field order."""
    hints = get_type_hints(record, include_extras=True)
    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name],
                              default=inspect.Parameter.empty if f.default is MISSING else f.default)
            for f in fields(record)]


def option_set(record: type, leading: Sequence[str] = ()) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator giving ``command(options: record, **own)`` the fields of ``record`` as Typer parameters."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        shared = shared_parameters(record)
        names = {p.name for p in shared}
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in list(inspect.signature(command, eval_str=True).parameters.values())[1:]]
        clash = names & {p.name for p in own}
        if clash:
            raise TypeError(f"{command.__name__}: parameters {sorted(clash)} are already shared options")
        params = ([p for name in leading for p in shared if p.name == name] + own
                  + [p for p in shared if p.name not in leading])

        def run(**kwargs: Any) -> None:
            options = record(**{name: kwargs.pop(name) for name in names})
            command(options, **kwargs)

        run.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        run.__name__, run.__qualname__, run.__doc__ = command.__name__, command.__qualname__, command.__doc__
        run.__module__ = command.__module__
        return run

    return decorate
