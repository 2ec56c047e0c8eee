"""The process's logging: one-line structured records with ISO timestamps, secrets masked.

Goal
    Every loop decision, action and error of a node is one line an operator can grep, ship and
    parse — and no line carries a secret.  ``guardian serve`` (``--log-level``, ``[logging]`` in the
    config), the other CLI commands and the demo set logging up here and nowhere else.

Method
    :func:`setup_logging` puts one handler on the root logger (replacing the one it put there
    before, leaving any other handler alone — a test's capture handler, say) writing to stderr in
    one of two formats:

    * ``text``: ``2026-11-21T10:00:00.123Z INFO guardian.executor [c1]: message`` (UTC, milliseconds;
      ``[c1]`` is the cluster the line is about, when a loop set it with :func:`cluster_scope`);
    * ``json``: ``{"ts", "level", "logger", "cluster"?, "msg", "thread", "exc"?}``.

    Either way a record is one line: newlines in the message or a traceback are escaped (``\\n``).
    The handler carries a :class:`RedactingFilter`, which rewrites each record's message (arguments
    merged first) and formatted exception through :func:`domain.redaction.redact`: URL passwords,
    bearer tokens, ``password=...`` pairs and every secret the process registered when it read it.
    Third-party loggers (uvicorn, pysyncobj, kafka-python, apscheduler) propagate to the root, so
    their lines get the same format and the same masking; kafka-python's per-connection chatter is
    held at WARNING unless the level asked for is DEBUG, and what passes is summarised (one line per
    logger and message template per minute, with the count held back: :class:`SummarisingFilter`; a
    template's figures do not count, so the selector's pre-formatted "Task ... ran for 0.157s ...
    blocking the event loop" lines are one kind).
    A cluster's client errors go through :data:`CLIENT_ERRORS` (:class:`Summariser`): one line per
    cluster and error kind per minute, with a count.  ERROR means an operator must act, so the
    handler's :class:`RetriedErrorFilter` writes kafka-python's ERROR records as WARNING: the library
    reconnects, refreshes metadata and retries on its own (a dead broker's refused connections, a
    position it re-validates), and what it gives up on reaches Guardian's code as an exception, which
    logs at the level the failure deserves.  The exception: a record about a failure no retry heals —
    a refused login, a missing ACL, a SASL mechanism the broker lacks, an untrusted certificate
    (:func:`needs_operator`) — stays ERROR.  (The record is changed in place, so handlers after this
    one see WARNING too.)

Guarantee
    After :func:`setup_logging`, a record reaching the root handler is written on one line with no
    registered secret and no URL password in it, and no kafka-python record is written above WARNING
    but a CRITICAL one and those :func:`needs_operator` picks.  Calling it again changes level/format
    in place.

Cost
    Per record one ``%`` merge, the redactor's regular expressions (a few µs) and one write.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal, TextIO

from domain.redaction import redact

LogFormat = Literal["text", "json"]
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_QUIET = ("kafka", "asyncio")  # per-connection chatter: held at WARNING unless DEBUG is asked for
_HANDLER_NAME = "guardian-root"
_cluster: ContextVar[str | None] = ContextVar("guardian_log_cluster", default=None)


@contextmanager
def cluster_scope(cluster: str) -> Iterator[None]:
    """Within the block (this thread / task), every log line names ``cluster`` (a loop's pass over one cluster)."""
    token = _cluster.set(cluster)
    try:
        yield
    finally:
        _cluster.reset(token)


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message and exception text (see :mod:`domain.redaction`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the record (or its secrets)
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = redact(message)
        record.args = None
        if getattr(record, "cluster", None) is None:
            record.cluster = _cluster.get()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_RETRIED_BY_LIBRARY = ("kafka",)  # logger trees whose ERROR lines report what the library retries itself
_NEEDS_OPERATOR = frozenset({"AuthorizationError", "SaslAuthenticationFailedError", "UnsupportedSaslMechanismError",
                             "IllegalSaslStateError", "SSLCertVerificationError"})
"""Failures no retry heals, by class name (kafka-python's ``kafka.errors`` and ``ssl``'s, matched along the class's
MRO so that this module imports neither): a refused login, a missing ACL (every ``*AuthorizationFailedError`` is an
``AuthorizationError``), a SASL mechanism the broker does not enable, a certificate the client does not trust."""
_NEEDS_OPERATOR_WORDS = ("authoriz", "saslhandshake failed", "authentication failed")
"""The same, in message templates that name the failure without passing the exception."""


def _is_operators(item: object) -> bool:
    cls = item if isinstance(item, type) else type(item)
    return any(c.__name__ in _NEEDS_OPERATOR for c in cls.__mro__)


def needs_operator(record: logging.LogRecord) -> bool:
    """Whether a kafka-python record reports a failure an operator must fix (:data:`_NEEDS_OPERATOR`): such an
    exception (or class) among its arguments or in its ``exc_info`` (causes followed a few levels), or a message
    template naming authorization or authentication."""
    items: list[object] = list(record.args) if isinstance(record.args, tuple) else [record.args]
    if record.exc_info:
        items.append(record.exc_info[1])
    for item in items:
        if isinstance(item, str):  # an exception's class name (kafka-python often logs ``error_type.__name__``)
            if item in _NEEDS_OPERATOR or item.endswith("AuthorizationFailedError"):
                return True
            continue
        if isinstance(item, type):
            if _is_operators(item):
                return True
            continue
        cur = item if isinstance(item, BaseException) else None
        for _ in range(4):
            if cur is None:
                break
            if _is_operators(cur):
                return True
            cur = cur.__cause__ or cur.__context__
    template = str(record.msg).lower()
    return any(word in template for word in _NEEDS_OPERATOR_WORDS)


class RetriedErrorFilter(logging.Filter):
    """ERROR records of kafka-python's loggers (``kafka``, ``kafka.*``) become WARNING unless they report a failure
    an operator must fix (:func:`needs_operator`: they stay ERROR, summarised like the rest); others pass as they
    are."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and any(
                record.name == root or record.name.startswith(root + ".") for root in _RETRIED_BY_LIBRARY) \
                and not needs_operator(record):
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        return True


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


class TextFormatter(logging.Formatter):
    """``<ISO time> <LEVEL> <logger>: <message>[ | <exception>]`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        cluster = getattr(record, "cluster", None)
        where = f" [{cluster}]" if cluster else ""
        line = f"{_iso(record.created)} {record.levelname} {record.name}{where}: {record.getMessage()}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += " | " + record.exc_text
        if record.stack_info:
            line += " | " + record.stack_info
        return _one_line(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``cluster`` (when known), ``msg``, ``thread`` and
    ``exc`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {"ts": _iso(record.created), "level": record.levelname, "logger": record.name}
        cluster = getattr(record, "cluster", None)
        if cluster:
            doc["cluster"] = cluster
        doc.update(msg=record.getMessage(), thread=record.threadName)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exc"] = record.exc_text
        return json.dumps(doc, ensure_ascii=False)


def formatter(fmt: LogFormat) -> logging.Formatter:
    """The formatter of ``fmt`` (``text`` or ``json``)."""
    return JsonFormatter() if fmt == "json" else TextFormatter()


def setup_logging(level: str = "INFO", fmt: LogFormat = "text", stream: TextIO | None = None) -> logging.Handler:
    """Install (or reconfigure) the root handler: ``level``, ``fmt``, secrets masked; returns the handler."""
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(RetriedErrorFilter())
    if name != "DEBUG":
        handler.addFilter(SummarisingFilter(_QUIET))  # before redaction: it keys on the message template
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    root.setLevel(name)
    for noisy in _QUIET:
        logging.getLogger(noisy).setLevel(logging.DEBUG if name == "DEBUG" else logging.WARNING)
    return handler


class Summariser:
    """Repeated lines summarised: the first line of a key is written at once, later ones of the same key are
    counted and at most one is written per ``window_s``, ending ``(N more like it in the last 60 s)``.

    The key is what makes two lines "the same": ``(cluster, kind)`` for a cluster's client errors (one line
    per cluster and kind per minute), ``(logger, message template)`` for third-party loggers. Thread-safe;
    O(1) per line; one entry per key (keys are bounded by clusters x kinds, templates)."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}

    def admit(self, key: Hashable) -> int | None:
        """None: hold this line back (counted); else write it, with this many held back since the last one."""
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.window_s:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)

    def log(self, logger: logging.Logger, level: int, key: Hashable, msg: str, *args: object) -> None:
        """``logger.log(level, msg, *args)`` unless held back (see the class docstring)."""
        held = self.admit(key)
        if held is None:
            return
        if held:
            logger.log(level, msg + " (%d more like it in the last %.0f s)", *args, held, self.window_s)
        else:
            logger.log(level, msg, *args)


CLIENT_ERRORS = Summariser()
"""The process's summariser of cluster client errors: one line per cluster and error kind per minute."""


_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")


def _shape(template: str) -> str:
    """A message template with its numbers (and hex addresses) blanked: kafka-python formats some messages before
    logging them (its selector's ``Task <...> ran for 0.157s (>0.100s threshold)``), and those are one kind of
    line whatever the figures."""
    return _NUMBERS.sub("#", template)


class SummarisingFilter(logging.Filter):
    """On the root handler, for records of the loggers under ``prefixes`` (kafka-python's): one record per
    logger, level and message template per window, the next one carrying the count held back (the level is
    part of the key, so a retried failure's WARNING never holds back an ERROR of the same template)."""

    def __init__(self, prefixes: tuple[str, ...], window_s: float = 60.0) -> None:
        super().__init__()
        self.prefixes = prefixes
        self.summary = Summariser(window_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if not any(record.name == p or record.name.startswith(p + ".") for p in self.prefixes):
            return True
        held = self.summary.admit((record.name, record.levelno, _shape(str(record.msg))))
        if held is None:
            return False
        if held:
            record.msg = f"{record.msg} (%d more like it in the last %.0f s)"
            record.args = (*(record.args if isinstance(record.args, tuple) else (record.args,) if record.args
                             else ()), held, self.summary.window_s)
        return True


def install_redaction() -> None:
    """Put a :class:`RedactingFilter` on every root handler that has none (handlers set up elsewhere)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
