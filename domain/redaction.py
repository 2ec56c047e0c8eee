"""Secrets out of text: the one redactor every log line, error message and record goes through.

Goal
    No secret the process knows — a URL's password, a bearer token, a ``password=...`` pair, the
    literal value of a SASL/metrics password, an API token or the Raft key — reaches a log line
    or an error text shown to someone.

Method
    Two passes over the text.  (1) *Shapes*: ``scheme://user:password@host`` keeps the user and
    masks the password (``scheme://user:***@host``); ``Authorization: Bearer X`` / ``Bearer X``;
    ``password=``, ``passwd=``, ``secret=``, ``token=``, ``api_key=`` (also with ``:`` and in
    JSON-ish ``"password": "..."``).  (2) *Literals*: every value registered with
    :func:`register_secret` (by whoever read it: the SASL password resolver, the Raft key reader,
    the admin token, the ClickHouse URL's password) is replaced by ``***`` wherever it appears, so
    a secret that leaks in a shape no pattern knows (an exception text quoting a config value) is
    still masked.  Values shorter than :data:`MIN_SECRET_CHARS` are not registered (masking every
    ``"abc"`` would make logs unreadable; such a secret is not one).

Guarantee
    ``redact(text)`` contains no registered secret and no password of a URL with userinfo; it never
    raises.  :func:`mask_url` returns the URL with its password replaced, for messages built on
    purpose (``connect`` errors, start-up lines).

Cost
    Three regular-expression substitutions plus one alternation over the registered literals
    (compiled once per registration) per call: a few µs for a log line.  Pure apart from the
    process-wide registry of literals (a set behind a lock).
"""

from __future__ import annotations

import re
import threading

MASK = "***"
MIN_SECRET_CHARS = 4

_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host -> scheme://user:***@host (the user stays: it says who connected)
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@"), r"\1" + MASK + "@"),
    (re.compile(r"(?i)(\bbearer\s+)[^\s,;'\"]+"), r"\1" + MASK),
    (re.compile(r"(?i)(\bbasic\s+)[A-Za-z0-9+/=]{8,}"), r"\1" + MASK),
    # password=..., "password": "...", token: ..., api_key=...
    (re.compile(r"""(?ix)
        (\b(?:[a-z_]*password|passwd|secret|token|api[_-]?key|access[_-]?key)\b["']?\s*[=:]\s*["']?)
        (?!\*\*\*)[^\s,;&'"}\]]+"""), r"\1" + MASK),
)

_lock = threading.Lock()
_literals: set[str] = set()
_literal_re: re.Pattern[str] | None = None


def register_secret(value: str | bytes | None) -> None:
    """Mask ``value`` (and its surrounding-whitespace-stripped form) in every later :func:`redact`.

    Call it where a secret is read (a password file, an environment variable, a generated token).
    None, empty and short values (< :data:`MIN_SECRET_CHARS`) are ignored.
    """
    global _literal_re
    if value is None:
        return
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str.__str__(value)
    forms = {f for f in (text, text.strip()) if len(f) >= MIN_SECRET_CHARS}
    if not forms:
        return
    with _lock:
        if forms <= _literals:
            return
        _literals.update(forms)
        # longest first, so a secret that contains another is masked whole
        _literal_re = re.compile("|".join(re.escape(s) for s in sorted(_literals, key=len, reverse=True)))


def registered_count() -> int:
    """How many literal secrets are registered (for tests and diagnostics; never the values)."""
    with _lock:
        return len(_literals)


def redact(text: str) -> str:
    """``text`` with registered secrets, URL passwords, bearer tokens and ``password=...`` values masked."""
    pattern = _literal_re
    if pattern is not None:
        text = pattern.sub(MASK, text)
    for shape, replacement in _SHAPES:
        text = shape.sub(replacement, text)
    return text


def mask_url(url: str) -> str:
    """``url`` with the password of its userinfo masked (``http://u:***@h:8123/db``); other parts kept."""
    return _SHAPES[0][0].sub(r"\1" + MASK + "@", url)
