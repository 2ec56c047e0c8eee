"""Prometheus text exposition (format 0.0.4) parsing.

Two interchangeable parsers return the same :class:`Payload`:

* :func:`parse_fast` — a line-oriented parser that only materialises the metric families it is
  asked for (``wanted``); O(lines), one regex call per sample with labels.
* :func:`parse_reference` — the maintained parser of ``prometheus_client`` (slower, used as the
  reference and in the benchmark's comparison).

Both tolerate garbage lines: a line that is not a valid sample is counted in
:attr:`Payload.bad_lines` and skipped; :func:`check_payload` decides when a payload is too broken
to trust at all. Sample timestamps (the optional third field, milliseconds) are not kept per
sample; :attr:`Payload.newest_ms` is the newest one in the payload (the sample clock of a source
that stamps its samples, such as a simulator running faster than the wall clock).
:func:`merge_payloads` joins the payloads of one broker's endpoints (JMX exporter, node_exporter,
...) into one, each family remembering the clock of the endpoint it came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter

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

    raw: dict[str, tuple[list[str], list[float]]] = field(default_factory=dict, repr=False)
    lines: int = 0
    samples: int = 0
    bad_lines: int = 0
    first_bad: str = ""
    newest_ms: int | None = None
    """The newest sample timestamp (ms since the epoch) of any sample line, None when none carries one."""
    clocks: dict[str, tuple[float, str]] = field(default_factory=dict, repr=False)
    """family -> (clock, clock kind) of the endpoint it came from (set by :func:`merge_payloads`; empty
    for a single endpoint's payload: every family has the payload's clock)."""

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


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"[^"\\\n\x00]*(?:\\[^\n\x00][^"\\\n\x00]*)*"'
_LABELS = rf"{_LABEL}(?:[ \t]*,[ \t]*{_LABEL})*(?:[ \t]*,)?"
_TAIL = r"[ \t]+([^ \t\r\n]+)(?:[ \t]+(-?[0-9]+))?[ \t\r]*"
# one sample line: name, optional {labels}, value, optional timestamp (groups: labels, value, timestamp)
_SAMPLE_RE = re.compile(rf"^[ \t]*{_NAME}[ \t]*(?:\{{[ \t]*({_LABELS})?[ \t]*\}})?{_TAIL}$", re.M)
_BODY_RE = re.compile(_LABELS)
# a run of consecutive lines that start with the same metric name (the exposition format keeps a
# family's samples together, so a payload is a few dozen runs); group 1 is the name
_RUN_RE = re.compile(rf"^[ \t]*({_NAME})(?=[ \t{{])[^\n]*(?:\n[ \t]*\1(?=[ \t{{])[^\n]*)*", re.M)
_CONTENT_RE = re.compile(r"^[ \t]*[^#\s]", re.M)
_TIMESTAMPS_RE = re.compile(r"-?[0-9]+(?:\n-?[0-9]+)*")
_LINE_RE = _SAMPLE_RE  # backwards-compatible name

_VALID_BODIES: set[str] = {""}
"""Label strings already proven well-formed by :data:`_BODY_RE` (bounded; payloads repeat them)."""


_TS_RE = re.compile(r"-?[0-9]+")


def _with_timestamps(vals: list[str]) -> tuple[list[float], int] | None:
    """(values, newest timestamp) of ``value timestamp`` strings, None unless every one is exactly that."""
    sp = list(map(str.split, vals))
    if set(map(len, sp)) != {2}:
        return None
    stamps = list(map(itemgetter(1), sp))
    if _TIMESTAMPS_RE.fullmatch("\n".join(stamps)) is None:
        return None
    try:
        return list(map(float, map(itemgetter(0), sp))), max(map(int, stamps))
    except ValueError:
        return None


def _split_run(text: str, name: str, s: int, e: int) -> tuple[list[str], list[float], int | None] | None:
    """The (label strings, values, newest timestamp) of a run of ``name{labels} value [timestamp]``
    lines, or None when any line is not exactly in that form (the caller then parses the run line by
    line with the full regex).

    All in C: the run is cut at ``\nname{`` and ``} `` into label strings and values; the cut is
    accepted only when it yields pairs, every label string is well-formed (:data:`_BODY_RE`,
    memoised in :data:`_VALID_BODIES`) and every value is a float.  A line of another shape
    (no braces, leading blanks, ``} `` inside a label value, stray bytes) leaves a label string or a
    value that fails these checks, so the run goes to the exact path.  Timestamps: when the last line
    ends in `` <integer>`` the run is first cut at ``<that suffix>\nname{`` (one scrape stamps every
    line alike); otherwise, or when that cut fails, each value is split from its own timestamp.
    """
    last = text[text.rfind("\n", s, e) + 1:e]
    tail = last[last.rfind("} ") + 2:] if "} " in last else ""
    gap = tail.find(" ")
    if gap > 0 and _TS_RE.fullmatch(tail, gap + 1) is not None:
        got = _cut_run(text, name, s, e, tail[gap:])
        if got is not None:
            return got
    return _cut_run(text, name, s, e, None)


def _cut_run(text: str, name: str, s: int, e: int,
             suffix: str | None) -> tuple[list[str], list[float], int | None] | None:
    """:func:`_split_run` with every line ending in ``suffix`` (`` <timestamp>``), or with each line's own."""
    head = name + "{"
    sep = "\n" + head
    ts: int | None = None
    if suffix is not None:
        if not text.endswith(suffix, s, e):
            return None
        sep = suffix + sep
        e -= len(suffix)
        ts = int(suffix)
    first: tuple[str, float] | None = None
    if not text.startswith(head, s):
        # an unlabelled sample may lead a labelled run (``x_total 5`` then ``x_total{topic="a"} 2``)
        nl = text.find("\n", s, e)
        if nl < 0 or not text.startswith(head, nl + 1):
            return None
        m = _SAMPLE_RE.match(text, s, nl)
        if m is None:
            return None
        try:
            first = (m.group(1) or "", float(m.group(2)))
        except ValueError:
            return None
        if m.group(3):
            lead = int(m.group(3))
            ts = lead if ts is None else max(ts, lead)
        s = nl + 1
    parts = text[s + len(head):e].replace(sep, "\x00").replace("} ", "\x00").split("\x00")
    if len(parts) % 2:
        return None
    bodies = parts[0::2]
    if not _VALID_BODIES.issuperset(bodies):
        full = _BODY_RE.fullmatch
        for b in set(bodies).difference(_VALID_BODIES):
            if full(b) is None:
                return None
        if len(_VALID_BODIES) > 2_000_000:
            _VALID_BODIES.clear()
            _VALID_BODIES.add("")
        _VALID_BODIES.update(bodies)
    vals = parts[1::2]
    try:
        values = list(map(float, vals))
    except ValueError:
        if suffix is not None:
            return None
        got = _with_timestamps(vals)  # every sample stamped, not all alike
        if got is None:
            return None
        values, newest = got
        if first is not None and ts is None:  # stamped lines after an unstamped lead line: the exact path
            return None
        ts = newest if ts is None else max(ts, newest)
    else:
        if suffix is None and ts is not None:  # a stamped lead line before unstamped lines: the exact path
            return None
    if first is not None:
        bodies.insert(0, first[0])
        values.insert(0, first[1])
    return bodies, values, ts


def _exact_run(text: str, s: int, e: int, nlines: int,
               cols: tuple[list[str], list[float]] | None) -> tuple[int, int, int | None]:
    """Parse one run with the full sample regex; returns (samples, bad lines, newest timestamp).
    ``cols`` None: only count."""
    triples = _SAMPLE_RE.findall(text, s, e)
    if len(triples) == nlines:
        try:
            floats = list(map(float, (v for _, v, _ in triples)))
        except ValueError:
            pass
        else:
            if cols is not None:
                cols[0].extend(b for b, _, _ in triples)
                cols[1].extend(floats)
            stamps = [int(t) for _, _, t in triples if t]
            return nlines, 0, max(stamps) if stamps else None
    kept = bad = 0
    newest: int | None = None
    for line in text[s:e].split("\n"):
        m = _SAMPLE_RE.match(line)
        if m is None:
            bad += 1
            continue
        try:
            v = float(m.group(2))
        except ValueError:
            bad += 1
            continue
        if cols is not None:
            cols[0].append(m.group(1) or "")
            cols[1].append(v)
        if m.group(3):
            newest = int(m.group(3)) if newest is None else max(newest, int(m.group(3)))
        kept += 1
    return kept, bad, newest


def _garbage_lines(text: str, s: int, e: int) -> int:
    """Lines of ``text[s:e]`` (the text between runs) that are neither blank nor comments."""
    n = 0
    for line in text[s:e].split("\n"):
        body = line.lstrip(" \t")
        if body and body[0] != "#" and not body[0].isspace():
            n += 1
    return n


def parse_fast(text: str, wanted: Iterable[str] | None = None) -> Payload:
    """Parse Prometheus text; keep only metric names in ``wanted`` (all when None).

    Never raises on bad input: malformed lines (bad labels, values that are not floats, lines that
    are not samples) are counted in ``bad_lines`` and skipped, in every family (wanted or not).
    O(len(text)) and nearly all of it in C: one regex pass cuts the text into runs of lines of one
    metric name (a family's samples are contiguous in the exposition format); each run is cut into
    label strings and values by string replace/split (:func:`_split_run`); per-line regex work
    happens only for runs holding a line of an unusual shape.
    """
    want = set(wanted) if wanted is not None else None
    out = Payload()
    fams = out.raw
    in_runs = 0
    bad = 0
    samples = 0
    gap_from = 0
    garbage = 0
    newest: int | None = None
    for m in _RUN_RE.finditer(text):
        name = m.group(1)
        s, e = m.span()
        if s > gap_from:
            garbage += _garbage_lines(text, gap_from, s)
        gap_from = e
        keep = want is None or name in want
        got = _split_run(text, name, s, e)
        if got is not None:
            bodies, values, ts = got
            if ts is not None and (newest is None or ts > newest):
                newest = ts
            nlines = len(bodies)
            in_runs += nlines
            if keep:
                cols = fams.get(name)
                if cols is None:
                    fams[name] = (bodies, values)
                else:
                    cols[0].extend(bodies)
                    cols[1].extend(values)
                samples += nlines
            continue
        nlines = text.count("\n", s, e) + 1
        in_runs += nlines
        cols = None
        if keep:
            cols = fams.get(name)
            if cols is None:
                cols = fams[name] = ([], [])
        kept, b, ts = _exact_run(text, s, e, nlines, cols)
        if ts is not None and (newest is None or ts > newest):
            newest = ts
        bad += b
        if keep:
            samples += kept
    if gap_from < len(text):
        garbage += _garbage_lines(text, gap_from, len(text))
    for name in [k for k, v in fams.items() if not v[0]]:
        del fams[name]
    out.samples = samples
    out.newest_ms = newest
    out.lines = in_runs + garbage
    out.bad_lines = bad + garbage
    if out.bad_lines:
        for raw in text.splitlines():
            line = raw.strip()
            if line and line[0] != "#":
                mm = _SAMPLE_RE.match(line)
                ok = mm is not None
                if mm is not None:
                    try:
                        float(mm.group(2))
                    except ValueError:
                        ok = False
                if not ok:
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


def check_payload(p: Payload, max_bad_fraction: float = 0.05, *, need_samples: bool = True) -> None:
    """Raise :class:`PayloadError` when ``p`` has no samples or too many malformed lines.

    ``need_samples=False``: a payload of valid lines none of which was kept (no wanted family) passes; an
    empty one still does not."""
    if p.lines == 0 or (need_samples and p.samples == 0):
        raise PayloadError("empty payload: no usable samples")
    if p.bad_lines > max(2, max_bad_fraction * p.lines):
        raise PayloadError(f"{p.bad_lines} of {p.lines} lines are not Prometheus samples "
                           f"(first: {p.first_bad!r})")


def finite(x: float) -> bool:
    """True for a finite float."""
    return not (math.isnan(x) or math.isinf(x))


def merge_payloads(parts: list[tuple[Payload, float, str]]) -> tuple[Payload, float, str]:
    """One broker's endpoint payloads (each with its clock and clock kind) as one payload.

    A family is taken from the first endpoint that has it (declared order) and remembers that
    endpoint's clock in :attr:`Payload.clocks`; the merged clock is the newest stamped clock
    (kind ``ts``) when any endpoint stamps its samples, else the newest receive time. O(families).
    """
    if len(parts) == 1:
        return parts[0]
    out = Payload()
    for p, clock, kind in parts:
        for name, cols in p.raw.items():
            if name not in out.raw:
                out.raw[name] = cols
                out.clocks[name] = p.clocks.get(name, (clock, kind))
        out.lines += p.lines
        out.samples += p.samples
        out.bad_lines += p.bad_lines
        out.first_bad = out.first_bad or p.first_bad
        if p.newest_ms is not None and (out.newest_ms is None or p.newest_ms > out.newest_ms):
            out.newest_ms = p.newest_ms
    stamped = [(c, k) for _, c, k in parts if k == "ts"]
    clock, kind = max(stamped or [(c, k) for _, c, k in parts])
    return out, clock, kind
