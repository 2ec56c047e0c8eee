"""One writer of throttle configs: only kafkaio/throttle_writer.py passes a throttle key to a config write.

The KIP-73 rates and throttled-replica lists, the KIP-113 intra-broker rate and Guardian's partition-throttle
keys are written by :class:`kafkaio.throttle_writer.ThrottleWriter` alone (it merges the owners' wishes by one
rule, see its module). This test reads every product module's AST and fails when another module

* calls a config write (``set_broker_configs``, ``set_topic_configs``, ``alter_topic_lists``, kafka-python's
  ``alter_configs`` / ``incremental_alter_configs``) with a throttle key — as a string literal or as one of
  :mod:`domain.throttles`' constants — anywhere in its arguments; or
* calls a config write at all and names a throttle key anywhere else in the module (the key travels to the
  write through a variable: the executor's old ``set_broker_configs({b: changes})``).

The port's adapters (modules that define the write verbs: ``kafkaio/admin.py``, ``kafkaio/fake.py``) receive
the writes rather than make them and are not callers. kafkasim (the broker side), tests and benchmarks are not
product code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import domain.throttles as throttles

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("domain", "kafkaio", "controlplane", "planners", "collectors", "analytics_spark", "raft", "tiered",
           "parentwatch", "kafkalab")
WRITER = "kafkaio/throttle_writer.py"
WRITE_VERBS = frozenset({"set_broker_configs", "set_topic_configs", "alter_topic_lists", "alter_configs",
                         "incremental_alter_configs"})
KEYS = frozenset({throttles.LEADER_RATE, throttles.FOLLOWER_RATE, throttles.ALTER_DIRS_RATE,
                  throttles.LEADER_REPLICAS, throttles.FOLLOWER_REPLICAS, throttles.PT_FETCH, throttles.PT_PRODUCE})


def _names_keys(value: object) -> bool:
    if isinstance(value, str):
        return value in KEYS
    if isinstance(value, Mapping):
        return any(_names_keys(v) for v in value.values())
    if isinstance(value, (tuple, list, frozenset, set)):
        return any(_names_keys(v) for v in value)
    return False


KEY_NAMES = frozenset(n for n, v in vars(throttles).items() if n.isupper() and _names_keys(v))
"""The kernel's constants that are (or hold) throttle keys: LEADER_RATE ... BROKER_THROTTLE_KEYS, MIGRATION_CEILINGS."""


def _key_mentions(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in KEYS:
            yield node.lineno, repr(node.value)
        elif isinstance(node, ast.Name) and node.id in KEY_NAMES:
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute) and node.attr in KEY_NAMES:
            yield node.lineno, node.attr


def _verb(call: ast.Call) -> str | None:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return name if name in WRITE_VERBS else None


def offences(source: str, path: str) -> list[str]:
    """Why ``source`` (module at ``path``) breaks the one-writer rule; empty when it keeps it."""
    tree = ast.parse(source, path)
    if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in WRITE_VERBS for n in ast.walk(tree)):
        return []  # a port adapter: it implements the writes it is handed
    writes = [(n, v) for n in ast.walk(tree) if isinstance(n, ast.Call) and (v := _verb(n)) is not None]
    if not writes:
        return []
    out = []
    for call, verb in writes:
        for line, key in _key_mentions(ast.Module(body=[ast.Expr(call)], type_ignores=[])):
            out.append(f"{path}:{line}: {verb}() is passed the throttle key {key}")
    if not out:
        mentions = sorted(set(_key_mentions(tree)))
        if mentions:
            verbs = ", ".join(sorted({f"{v}() (line {c.lineno})" for c, v in writes}))
            out.append(f"{path}: calls {verbs} and names the throttle key(s) "
                       f"{', '.join(f'{k} (line {ln})' for ln, k in mentions[:5])}: hand the wish to "
                       f"kafkaio.throttle_writer.ThrottleWriter, or split the module")
    return out


def product_modules() -> Iterator[tuple[str, str]]:
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def test_only_the_throttle_writer_writes_throttle_keys() -> None:
    found = [o for path, src in product_modules() if path != WRITER for o in offences(src, path)]
    assert found == [], "throttle configs written outside the one writer:\n" + "\n".join(found)


def test_the_scan_sees_the_writers_own_writes() -> None:
    """The scanner is not blind: the writer itself, were it not the writer, breaks the rule."""
    assert offences((ROOT / WRITER).read_text(encoding="utf-8"), WRITER)


def test_the_scan_flags_every_way_a_key_reaches_a_write() -> None:
    literal = 'def f(admin):\n    admin.set_broker_configs({1: {"leader.replication.throttled.rate": "5"}})\n'
    constant = ("from domain.throttles import FOLLOWER_REPLICAS\n"
                "def f(admin, t, e):\n    admin.alter_topic_lists(t, FOLLOWER_REPLICAS, append=[e])\n")
    attribute = ("import domain.throttles as th\n"
                 "def f(a, t):\n    a.set_topic_configs({t: {th.PT_FETCH: None}})\n")
    kafka_python = ('def f(admin, R, T):\n    admin.alter_configs([R(T.BROKER, "1", configs={'
                    '"replica.alter.log.dirs.io.max.bytes.per.second": "1"})])\n')
    through_a_variable = ("from domain.throttles import LEADER_RATE\n"
                          "def want(r):\n    return {LEADER_RATE: str(r)}\n"
                          "def f(admin, b, changes):\n    admin.set_broker_configs({b: changes})\n")
    for src in (literal, constant, attribute, kafka_python, through_a_variable):
        assert offences(src, "m.py"), src
    reads_only = "from domain.throttles import BROKER_THROTTLE_KEYS\ndef f(a):\n    return a.broker_configs([1])\n"
    other_configs = "def f(port, changes):\n    port.set_broker_configs(changes)\n"
    assert offences(reads_only, "m.py") == [] and offences(other_configs, "m.py") == []
