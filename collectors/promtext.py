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
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")


class PayloadError(ValueError):
    """A scraped payload is unusable (empty, mostly garbage, not Prometheus text)."""


@dataclass(slots=True)
class Payload:
    """Samples of one scrape, grouped by metric name: ``name -> [(labels, value), ...]``.

    Values are floats exactly as exposed (NaN/Inf included: rate math decides what to drop).
    """

    families: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    lines: int = 0
    samples: int = 0
    bad_lines: int = 0
    first_bad: str = ""

    def get(self, name: str) -> list[tuple[dict[str, str], float]]:
        """Samples of ``name`` (empty list when absent)."""
        return self.families.get(name, [])

    def scalar(self, name: str) -> float | None:
        """The value of an unlabelled sample of ``name``, or None."""
        for labels, value in self.families.get(name, ()):
            if not labels:
                return value
        return None


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def _parse_value(text: str) -> float:
    v = float(text)  # accepts NaN, +Inf, -Inf, exponents
    return v


def parse_fast(text: str, wanted: Iterable[str] | None = None) -> Payload:
    """Parse Prometheus text; keep only metric names in ``wanted`` (all when None).

    Never raises on bad input: malformed lines are counted in ``bad_lines``.
    O(len(text)).
    """
    want = set(wanted) if wanted is not None else None
    out = Payload()
    fams = out.families
    find_labels = _LABEL_RE.findall
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        out.lines += 1
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace].rstrip()
            if want is not None and name not in want:
                if not _NAME_RE.match(name) or line.rfind("}") < brace:
                    out.bad_lines += 1
                    out.first_bad = out.first_bad or line[:80]
                continue
            close = line.rfind("}")
            if close < brace:
                out.bad_lines += 1
                out.first_bad = out.first_bad or line[:80]
                continue
            body = line[brace + 1:close]
            rest = line[close + 1:].split()
            pairs = find_labels(body)
            labels = {k: _unescape(v) for k, v in pairs}
            # everything inside the braces must have been consumed by label pairs
            if body.strip() and sum(1 for _ in pairs) == 0:
                out.bad_lines += 1
                out.first_bad = out.first_bad or line[:80]
                continue
        else:
            parts = line.split()
            name = parts[0]
            if want is not None and name not in want:
                if not _NAME_RE.match(name) or len(parts) < 2:
                    out.bad_lines += 1
                    out.first_bad = out.first_bad or line[:80]
                continue
            rest = parts[1:]
            labels = {}
        if not rest or len(rest) > 2 or not _NAME_RE.match(name):
            out.bad_lines += 1
            out.first_bad = out.first_bad or line[:80]
            continue
        try:
            value = _parse_value(rest[0])
        except ValueError:
            out.bad_lines += 1
            out.first_bad = out.first_bad or line[:80]
            continue
        fam = fams.get(name)
        if fam is None:
            fam = fams[name] = []
        fam.append((labels, value))
        out.samples += 1
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
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out.lines += 1
                if want is not None and s.name not in want:
                    continue
                out.families.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
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
