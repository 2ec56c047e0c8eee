"""The fast parser on generated exposition text: the same samples as prometheus_client, and the newest
sample timestamp, whether every line, some lines or no line carries one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.promtext import parse_fast, parse_reference

NAMES = st.sampled_from(["a_total", "b", "kafka_log_log_size", "node_disk_io_time_seconds_total"])
LABEL_VALUES = st.text(alphabet=st.sampled_from(list('abz09 _-/}{,="\\')), max_size=6)
VALUES = st.one_of(st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr),
                   st.sampled_from(["NaN", "+Inf", "-Inf"]))
STAMPS = st.one_of(st.none(), st.integers(0, 2 * 10**12))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


@st.composite
def runs(draw: st.DrawFn) -> tuple[str, list[int]]:
    """Families of 1-6 samples each, every family's lines together; returns (text, timestamps used)."""
    lines: list[str] = []
    stamps: list[int] = []
    uniform = draw(st.booleans())
    shared = draw(st.integers(0, 2 * 10**12))
    for name in draw(st.lists(NAMES, min_size=1, max_size=4, unique=True)):
        lines.append(f"# TYPE {name} gauge")
        if draw(st.booleans()):  # an unlabelled sample may lead the family (a broker-wide total)
            ts = shared if uniform else draw(STAMPS)
            if ts is not None:
                stamps.append(ts)
            lines.append(f"{name} {draw(VALUES)}" + ("" if ts is None else f" {ts}"))
        seen: set[str] = set()
        for _ in range(draw(st.integers(1, 6))):
            lab = draw(LABEL_VALUES)
            if lab in seen:
                continue
            seen.add(lab)
            ts = shared if uniform else draw(STAMPS)
            tail = "" if ts is None else f" {ts}"
            if ts is not None:
                stamps.append(ts)
            lines.append(f'{name}{{x="{_esc(lab)}"}} {draw(VALUES)}{tail}')
    return "\n".join(lines) + "\n", stamps


@settings(max_examples=500, deadline=None)
@given(runs())
def test_fast_parser_matches_the_reference_with_and_without_timestamps(case: tuple[str, list[int]]) -> None:
    text, stamps = case
    fast, ref = parse_fast(text), parse_reference(text)
    assert fast.bad_lines == 0
    norm = {k: sorted((tuple(sorted(lab.items())), repr(v)) for lab, v in vals) for k, vals in fast.families.items()}
    nref = {k: sorted((tuple(sorted(lab.items())), repr(v)) for lab, v in vals) for k, vals in ref.families.items()}
    assert norm == nref
    assert fast.newest_ms == (max(stamps) if stamps else None)
