"""The remote store of kafkasim's tiered topics: where closed segments are uploaded (a stand-in for HDFS).

Goal
    One small interface between the tiered partitions (:mod:`kafkasim.tiering.tiered`) and the storage that holds
    their remote segments, so the simulator writes real files that a remote read serves back byte for byte.

Method
    :class:`RemoteStore` is four calls on relative paths (``put``, ``get``, ``delete``, ``size``).
    :class:`LocalDirStore` keeps them under one directory (write to a temporary name, fsync-free rename:
    a reader never sees half a segment).  At scale the same four calls map onto ``pyarrow.fs``
    (``HadoopFileSystem(host, port)``: ``open_output_stream`` / ``open_input_file`` / ``delete_file`` /
    ``get_file_info``), which reaches real HDFS through libhdfs — an adapter of a dozen lines, not built
    here because kafkasim runs on one machine.

Guarantee
    ``put`` replaces the object whole or not at all; ``get`` of a missing object raises ``FileNotFoundError``;
    ``delete`` of a missing object is not an error (deletes are retried after a fenced or failed attempt).
    Paths are confined to the root (``..`` and absolute paths are refused).

Cost
    One file write/read per segment; no caching here (callers cache parsed segments).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class RemoteStore(Protocol):
    """Objects by relative path (``cluster/topic-id/partition/offset-epoch.log``)."""

    def put(self, path: str, data: bytes) -> int:
        """Store ``data`` at ``path`` (replacing it); returns the bytes written."""
        ...

    def get(self, path: str) -> bytes:
        """The object's bytes; ``FileNotFoundError`` when absent."""
        ...

    def delete(self, path: str) -> None:
        """Remove the object (absent: nothing happens)."""
        ...

    def size(self, path: str) -> int:
        """The object's size in bytes; ``FileNotFoundError`` when absent."""
        ...


class LocalDirStore:
    """A :class:`RemoteStore` in a local directory (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.bytes_written = 0
        self.bytes_read = 0

    def _path(self, path: str) -> Path:
        rel = Path(path)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"remote path must be relative and inside the store: {path!r}")
        return self.root / rel

    def put(self, path: str, data: bytes) -> int:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        self.bytes_written += len(data)
        return len(data)

    def get(self, path: str) -> bytes:
        data = self._path(path).read_bytes()
        self.bytes_read += len(data)
        return data

    def delete(self, path: str) -> None:
        self._path(path).unlink(missing_ok=True)

    def size(self, path: str) -> int:
        return self._path(path).stat().st_size
