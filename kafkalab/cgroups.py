"""Goal: make one lab broker's disk behave like a production disk under a lagging consumer — a page cache too
small to hold what it lags behind, and a device that saturates at a modest read rate — without touching
anything outside the lab (other labs and processes share the machine).

Method (cgroup v1, root; each cgroup is named after the lab's directory and the node, and recorded in the lab's
state so that :func:`release` — called by ``guardian lab down`` — undoes it):

* **memory** (:func:`confine_memory`): a memory cgroup with ``memory.limit_in_bytes`` for the broker's JVM.
  Kafka's reads and writes then evict each other inside that limit, as on a broker whose page cache is small
  next to its traffic. cgroup v1 charges a page to the cgroup that first touched it, and this kernel no longer
  moves charges (``memory.move_charge_at_immigrate`` is refused): what the broker had cached before is not
  charged to it. :func:`evict` drops the clean cached pages of one log dir's files (``fdatasync`` then
  ``posix_fadvise(DONTNEED)``, the lab's own files only — never ``/proc/sys/vm/drop_caches``, which would empty
  every other lab's cache too).
* **reads** (:func:`throttle_reads`): a blkio cgroup whose ``blkio.throttle.read_bps_device`` caps the
  broker's reads of the block device holding the log dirs' images. A loop device issues its direct I/O to the
  image on behalf of the reading process's cgroup (the loop driver charges I/O to the submitter's blkcg), so
  the broker's reads of a log dir wait on the backing device *while in flight on the loop device*: the log
  dir's own device shows util near 1 at that rate in ``/proc/diskstats`` (and node_exporter). Capping the loop
  device itself would not: blk-throttle holds a bio before it becomes a request, so that wait counts in no
  device's busy time (measured here: 5 MB/s of reads through a capped loop device left its io_ticks still).
  The cap is per broker: every log dir of the broker whose image is on that device reads at most that rate.

Guarantee: each function either does what it says or raises :class:`LabError` naming the step; :func:`release`
moves the lab's processes back to the root cgroups, removes the lab's cgroups and never raises for something
already gone.
Cost: a few writes to cgroupfs; ``evict`` reads no data (one fdatasync + fadvise per file).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path
from typing import Any

from kafkalab.errors import LabError

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_name(directory: Path, node_id: int) -> str:
    """The lab's cgroup name for a node: unique per lab directory (labs of other users of the machine differ)."""
    digest = hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:10]
    return f"guardian-lab-{digest}-n{node_id}"


def unavailable(controller: str) -> str | None:
    """Why the cgroup v1 ``controller`` cannot be used here, or ``None``."""
    if os.geteuid() != 0:
        return "not running as root"
    base = CGROUP_ROOT / controller
    if not (base / "cgroup.procs").exists():
        return f"no cgroup v1 {controller} controller at {base}"
    return None


def _write(path: Path, value: str, step: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise LabError(f"{step}: writing {value.strip()!r} to {path} failed: {exc}") from None


def _join(controller: str, name: str, pid: int) -> Path:
    why = unavailable(controller)
    if why is not None:
        raise LabError(f"cgroup v1 {controller}: {why}")
    group = CGROUP_ROOT / controller / name
    group.mkdir(exist_ok=True)
    _write(group / "cgroup.procs", str(pid), f"moving pid {pid} into {group}")
    return group


def backing_device(path: Path) -> str:
    """``MAJ:MIN`` of the block device holding ``path`` (a loop device's image file)."""
    st = os.stat(path)
    mm = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if not Path(f"/sys/dev/block/{mm}").exists():
        raise LabError(f"{path} is on device {mm}, which is not a block device (an overlay or tmpfs?): "
                       "its reads cannot be throttled with blkio")
    return mm


def confine_memory(doc: dict[str, Any], node_id: int, limit_bytes: int) -> dict[str, Any]:
    """Put node ``node_id``'s JVM in a memory cgroup limited to ``limit_bytes``; records it in ``doc``.

    The limit must leave room for the JVM's own memory (its heap and non-heap are charged as they are touched):
    the machine has no swap, so a limit under the JVM's needs ends in the OOM killer."""
    node = _node(doc, node_id)
    group = _join("memory", cgroup_name(Path(doc["dir"]), node_id), int(node["pid"]))
    _write(group / "memory.limit_in_bytes", str(int(limit_bytes)), f"limiting node {node_id}'s memory")
    entry = {"controller": "memory", "path": str(group), "limit_bytes": int(limit_bytes)}
    _record(doc, node_id, entry)
    return entry


def throttle_reads(doc: dict[str, Any], node_id: int, bytes_per_s: int) -> dict[str, Any]:
    """Cap node ``node_id``'s reads of the device under its log dirs' images at ``bytes_per_s``; records it in
    ``doc`` (with the node's read ceiling, which the endpoints document then declares for its disks)."""
    node = _node(doc, node_id)
    images = [Path(d["image"]) for d in doc.get("log_dirs", [])
              if d.get("image") and d["path"] in node["log_dirs"]]
    if not images:
        raise LabError(f"node {node_id}'s log dirs are not on loop devices: nothing to throttle")
    devices = sorted({backing_device(i) for i in images})
    group = _join("blkio", cgroup_name(Path(doc["dir"]), node_id), int(node["pid"]))
    for mm in devices:
        _write(group / "blkio.throttle.read_bps_device", f"{mm} {int(bytes_per_s)}",
               f"throttling node {node_id}'s reads of {mm}")
    entry = {"controller": "blkio", "path": str(group), "devices": devices, "read_bytes_per_s": int(bytes_per_s)}
    _record(doc, node_id, entry)
    return entry


def evict(paths: list[Path]) -> int:
    """Drop the cached pages of every file under ``paths`` (written back first); returns the files evicted."""
    n = 0
    for root in paths:
        for f in sorted(Path(root).rglob("*")):
            if not f.is_file():
                continue
            with contextlib.suppress(OSError):
                fd = os.open(f, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    n += 1
                finally:
                    os.close(fd)
    return n


def release(doc: dict[str, Any], node_id: int | None = None) -> list[str]:
    """Move the lab's processes out of its cgroups (``node_id``'s only, if given) and remove them; returns what
    could not be undone (one line each), never raises."""
    problems: list[str] = []
    for key, entries in sorted((doc.get("cgroups") or {}).items()):
        if node_id is not None and int(key) != node_id:
            continue
        for e in entries:
            group = Path(e["path"])
            if not group.exists():
                continue
            root = CGROUP_ROOT / e["controller"] / "cgroup.procs"
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        root.write_text(pid)
            for attempt in range(50):  # a JVM that just exited may still be leaving the group (EBUSY)
                try:
                    group.rmdir()
                    break
                except OSError as exc:
                    if attempt == 49:
                        problems.append(f"rmdir {group}: {exc}")
                    time.sleep(0.1)
        if not problems:
            doc["cgroups"].pop(key, None)
    return problems


def read_ceilings(doc: dict[str, Any]) -> dict[int, int]:
    """node id -> the read rate its disks are capped at (:func:`throttle_reads`)."""
    out: dict[int, int] = {}
    for key, entries in (doc.get("cgroups") or {}).items():
        for e in entries:
            if e.get("controller") == "blkio" and e.get("read_bytes_per_s"):
                out[int(key)] = int(e["read_bytes_per_s"])
    return out


def _node(doc: dict[str, Any], node_id: int) -> dict[str, Any]:
    for n in doc.get("nodes", []):
        if n["id"] == node_id:
            if not n.get("pid"):
                raise LabError(f"node {node_id} is not running")
            return dict(n)
    raise LabError(f"--broker: no node {node_id} in the lab")


def _record(doc: dict[str, Any], node_id: int, entry: dict[str, Any]) -> None:
    entries = doc.setdefault("cgroups", {}).setdefault(str(node_id), [])
    entries[:] = [e for e in entries if e["controller"] != entry["controller"]] + [entry]
