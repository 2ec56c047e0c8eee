"""Generated gRPC/protobuf code for ``tiered_metadata.proto``, built from the .proto on first import.

Goal
    The generated modules are build output, never edited nor committed: ``import tiered.proto`` runs
    ``grpc_tools.protoc`` on the .proto into a cache directory keyed by the .proto's SHA-256 and the
    protoc version, and loads ``pb`` (messages) and ``rpc`` (stubs, servicer) from it.

Method
    Cache directory ``$GUARDIAN_PROTO_CACHE`` or ``~/.cache/guardian/proto/<hash>``; generation writes to a
    temp directory and renames it into place, so concurrent first imports (several ``guardian serve``
    processes) never see half a module.

Cost
    ~0.3 s for protoc on the first import per .proto version; a plain import afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc_tools
from grpc_tools import protoc

PROTO = Path(__file__).with_name("tiered_metadata.proto")
_STEM = "tiered_metadata"


def _cache_dir() -> Path:
    digest = hashlib.sha256(PROTO.read_bytes() + grpc_tools.__file__.encode()).hexdigest()[:16]
    root = Path(os.environ.get("GUARDIAN_PROTO_CACHE") or Path.home() / ".cache" / "guardian" / "proto")
    return root / digest


def generate() -> Path:
    """Generate the modules (once per .proto version); return their directory."""
    target = _cache_dir()
    if (target / f"{_STEM}_pb2_grpc.py").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".gen-"))
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(["grpc_tools.protoc", f"-I{PROTO.parent}", f"-I{include}", f"--python_out={tmp}",
                        f"--grpc_python_out={tmp}", str(PROTO)])
    if code != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (exit {code})")
    with contextlib.suppress(OSError):  # another process won the race
        os.replace(tmp, target)
    return target


def _load(directory: Path, name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the grpc module imports the pb2 module by this name
    spec.loader.exec_module(module)
    return module


_DIR = generate()
pb: Any = _load(_DIR, f"{_STEM}_pb2")
rpc: Any = _load(_DIR, f"{_STEM}_pb2_grpc")
