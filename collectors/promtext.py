"""Prometheus text exposition (format 0.0.4) parsing.

Two interchangeable parsers return the same :class:`Payload`:

* :func:`parse_fast` — a line-oriented parser that only materialises the metric families it is
  asked for (``wanted``); O(lines), one regex call per sample with labels.
* :func:`parse_reference` — the maintained parser of ``prometheus_client`` (slower, used as the
  reference and in the benchmark's comparison).

Both tolerate garbage lines: a line that is not a valid sample is counted in
:attr:`Payload.bad_lines` and skipped; :func:`check_payload` decides when a payload is too broken
to trust at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]

_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?\s*')


class PayloadError(ValueError):
    """A scraped payload is unusable (empty, mostly garbage, not Prometheus text)."""


_LABELS_CACHE: dict[str, dict[str, str] | None] = {"": {}}


def labels_of(body: str) -> dict[str, str] | None:
    """The label dict of a raw label string (``a="1",b="2"``); None when malformed. Cached."""
    got = _LABELS_CACHE.get(body)
    if got is not None or body in _LABELS_CACHE:
        return got
    pairs = _LABEL_RE.findall(body)
    rest = _LABEL_RE.sub("", body).strip()
    labels = None if rest else {k: _unescape(v) for k, v in pairs}
    if len(_LABELS_CACHE) > 2_000_000:
        _LABELS_CACHE.clear()
        _LABELS_CACHE[""] = {}
    _LABELS_CACHE[body] = labels
    return labels


@dataclass(slots=True)
class Payload:
    """Samples of one scrape, columnar per metric name: ``name -> (raw label strings, values)``.

    The raw label string (what is between the braces) identifies a series within a payload and
    is what rate state is keyed by; :meth:`get` parses labels on demand (cached).  Values are
    floats exactly as exposed (NaN/Inf included: rate math decides what to drop).
    """

    raw: dict[str, tuple[list[str], list[float]]] = field(default_factory=dict)
    lines: int = 0
    samples: int = 0
    bad_lines: int = 0
    first_bad: str = ""

    @property
    def families(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Every family as ``[(labels, value), ...]`` (parses all labels: for tests and tools)."""
        return {name: self.get(name) for name in self.raw}

    def get(self, name: str) -> list[tuple[dict[str, str], float]]:
        """Samples of ``name`` with parsed labels (empty list when absent); malformed labels skipped."""
        fam = self.raw.get(name)
        if fam is None:
            return []
        out = []
        for body, v in zip(fam[0], fam[1], strict=True):
            lab = labels_of(body)
            if lab is not None:
                out.append((lab, v))
        return out

    def scalar(self, name: str) -> float | None:
        """The value of an unlabelled sample of ``name``, or None."""
        fam = self.raw.get(name)
        if fam is None:
            return None
        for body, v in zip(fam[0], fam[1], strict=True):
            if not body:
                return v
        return None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


_LINE_RE = re.compile(
    r"^[ \t]*([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{(.*)\})?[ \t]+([^ \t\r\n]+)(?:[ \t]+-?[0-9]+)?[ \t\r]*$",
    re.M)
_CONTENT_RE = re.compile(r"^[ \t]*[^#\s]", re.M)


def parse_fast(text: str, wanted: Iterable[str] | None = None) -> Payload:
    """Parse Prometheus text; keep only metric names in ``wanted`` (all when None).

    Never raises on bad input: malformed lines are counted in ``bad_lines``.  One C-level regex
    pass over the whole text; label sets are parsed once per distinct label string.  O(len(text)).
    """
    want = set(wanted) if wanted is not None else None
    out = Payload()
    fams = out.raw
    matched = 0
    for name, body, value in _LINE_RE.findall(text):
        matched += 1
        if want is not None and name not in want:
            continue
        if body and ("=" not in body or body.count('"') % 2):
            out.bad_lines += 1
            continue
        try:
            v = float(value)
        except ValueError:
            out.bad_lines += 1
            continue
        fam = fams.get(name)
        if fam is None:
            fam = fams[name] = ([], [])
        fam[0].append(body.strip())
        fam[1].append(v)
        out.samples += 1
    out.lines = len(_CONTENT_RE.findall(text))
    out.bad_lines += max(out.lines - matched, 0)
    if out.bad_lines:
        for raw in text.splitlines():
            line = raw.strip()
            if line and line[0] != "#" and not _LINE_RE.match(line):
                out.first_bad = line[:80]
                break
    return out


def parse_reference(text: str, wanted: Iterable[str] | None = None) -> Payload:
    """Parse with ``prometheus_client.parser`` (the maintained reference parser).

    Counter samples keep their exposed name (``*_total``). Raises :class:`PayloadError` when the
    reference parser rejects the text (it stops at the first bad line).
    """
    from prometheus_client.parser import text_string_to_metric_families

    want = set(wanted) if wanted is not None else None
    out = Payload()
    try:
        for metric in text_string_to_metric_families(text):
            for s in metric.samples:
                out.lines += 1
                if want is not None and s.name not in want:
                    continue
                body = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                col = out.raw.setdefault(s.name, ([], []))
                col[0].append(body)
                col[1].append(float(s.value))
                out.samples += 1
    except (ValueError, TypeError, IndexError) as exc:
        raise PayloadError(f"prometheus_client rejected the payload: {exc}") from None
    return out


def check_payload(p: Payload, max_bad_fraction: float = 0.05) -> None:
    """Raise :class:`PayloadError` when ``p`` has no samples or too many malformed lines."""
    if p.lines == 0 or p.samples == 0:
        raise PayloadError("empty payload: no usable samples")
    if p.bad_lines > max(2, max_bad_fraction * p.lines):
        raise PayloadError(f"{p.bad_lines} of {p.lines} lines are not Prometheus samples "
                           f"(first: {p.first_bad!r})")


def finite(x: float) -> bool:
    """True for a finite float."""
    return not (math.isnan(x) or math.isinf(x))
