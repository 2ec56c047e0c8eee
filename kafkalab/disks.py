"""Goal: give every JBOD log dir of the lab a block device of its own, so that node_exporter's
``node_disk_*`` series for that device measure that log dir and nothing else.

Method: per log dir, a sparse image file (``truncate``), an ext4 file system on it (``mkfs.ext4``, inode
tables and journal initialised at once so that no background ``ext4lazyinit`` writes pollute the device's
counters), a loop device (``losetup --direct-io=on``: the loop device reads and writes the image with
O_DIRECT, so its latency is the backing disk's and nothing is cached twice) mounted at the log dir's path
(``noatime``). Where loop devices are impossible (not root, no ``losetup``/``mkfs.ext4``, no
``/dev/loop-control``) and the caller allows it, log dirs are plain directories and the reason is returned,
so that the endpoints document and every figure measured on them can say so.

A log dir's disk is failed (:func:`fail`) as a dying disk fails under ext4: the file system is shut down
(``EXT4_IOC_SHUTDOWN``, the ioctl xfstests' ``godown`` uses), after which every read and write on it, through
descriptors already open too, returns ``EIO`` — what Kafka sees when the disk under a log dir dies (KIP-112:
the broker takes the dir offline on the first ``IOException``). The mount stays, so :func:`release` unmounts it.

Guarantee: :func:`provision` either returns every log dir ready or undoes what it did and raises
:class:`LabError` naming the step; :func:`release` unmounts, detaches and deletes whatever is still there
(a failed file system included) and never raises for something already gone.
Cost: one ``mkfs.ext4`` per log dir (~0.1 s for 2 GiB) and three short commands.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kafkalab.errors import LabError

DiskMode = Literal["auto", "loop", "dir"]
EXT4_IOC_SHUTDOWN = 0x8004587D
"""``_IOR('X', 125, __u32)`` (linux/fs/ext4/ext4.h; the same number as XFS_IOC_GOINGDOWN)."""
SHUTDOWN_NOLOGFLUSH = 2
"""``EXT4_GOING_FLAGS_NOLOGFLUSH``: stop at once, the journal not flushed (a disk that vanished)."""


@dataclass(frozen=True)
class LogDir:
    """One log dir: its path (the mount point when on a loop device), the image file and the device."""

    path: Path
    image: Path | None = None
    device: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"path": str(self.path), "image": str(self.image) if self.image else None, "device": self.device}

    @staticmethod
    def from_json(d: dict[str, str | None]) -> LogDir:
        image = d.get("image")
        return LogDir(Path(str(d["path"])), Path(image) if image else None, d.get("device"))


def loop_unavailable() -> str | None:
    """Why loop devices cannot be used here, or ``None`` when they can."""
    if os.geteuid() != 0:
        return "not running as root (losetup and mount need it)"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/dev/loop-control").exists():
        return "/dev/loop-control does not exist (no loop driver)"
    return None


def _run(cmd: list[str], step: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"{step} failed ({' '.join(cmd)}): {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def _make_loop(path: Path, image: Path, size_bytes: int) -> LogDir:
    image.parent.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_bytes)
    _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image)],
         f"mkfs.ext4 of {image}")
    for attempt in range(3):  # another process may take the free device between losetup's lookup and its claim
        try:
            device = _run(["losetup", "-f", "--show", "--direct-io=on", str(image)], f"losetup of {image}")
            break
        except LabError:
            if attempt == 2:
                raise
            time.sleep(0.2)
    made = LogDir(path, image, device)
    try:
        path.mkdir(parents=True, exist_ok=True)
        _run(["mount", "-o", "noatime", device, str(path)], f"mount of {device} at {path}")
        lost = path / "lost+found"  # the log dir is the mount point: Kafka would take it for a partition dir
        if lost.exists():
            shutil.rmtree(lost, ignore_errors=True)
    except LabError:
        release([made])
        raise
    return made


def provision(paths: list[Path], images_dir: Path, size_bytes: int, mode: DiskMode = "auto"
              ) -> tuple[list[LogDir], str | None]:
    """Prepare every log dir; returns them and, when they are plain directories, why (``None`` on loop devices)."""
    reason = loop_unavailable() if mode != "dir" else "plain directories were asked for (--disks dir)"
    if reason is not None and mode == "loop":
        raise LabError(f"loop devices are unavailable: {reason}")
    if reason is not None:
        for p in paths:
            p.mkdir(parents=True, exist_ok=True)
        return [LogDir(p) for p in paths], reason
    made: list[LogDir] = []
    try:
        for i, p in enumerate(paths):
            made.append(_make_loop(p, images_dir / f"logdir-{i}.img", size_bytes))
    except LabError:
        release(made)
        raise
    return made, None


def release(log_dirs: list[LogDir]) -> list[str]:
    """Unmount, detach and delete; returns what could not be undone (one line each), never raises."""
    problems: list[str] = []
    for d in log_dirs:
        if d.device is None:
            continue
        if os.path.ismount(d.path):
            proc = subprocess.run(["umount", str(d.path)], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                lazy = subprocess.run(["umount", "-l", str(d.path)], capture_output=True, text=True, check=False)
                if lazy.returncode != 0:
                    problems.append(f"umount {d.path}: {proc.stderr.strip()}")
        subprocess.run(["losetup", "-d", d.device], capture_output=True, check=False)
        if d.image is not None:
            try:
                d.image.unlink(missing_ok=True)
            except OSError as exc:
                problems.append(f"rm {d.image}: {exc}")
    return problems


def fail(log_dir: LogDir) -> None:
    """Make ``log_dir``'s disk fail: every I/O on its file system returns ``EIO`` from now on (until it is
    unmounted). Only a log dir on its own loop device can fail alone."""
    if log_dir.device is None or not os.path.ismount(log_dir.path):
        raise LabError(f"{log_dir.path} is not on a loop device of its own (plain directories share the host's "
                       "disk, which cannot fail alone): start the lab as root with --disks loop")
    fd = os.open(log_dir.path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", SHUTDOWN_NOLOGFLUSH))
    except OSError as exc:
        raise LabError(f"shutting down the file system of {log_dir.path} ({log_dir.device}) failed: {exc}") from None
    finally:
        os.close(fd)


def device_name(device: str | None) -> str | None:
    """``/dev/loop3`` -> ``loop3`` (the ``device`` label node_exporter's diskstats series carry)."""
    return device.rsplit("/", 1)[-1] if device else None


def major_minor(device: str) -> str:
    """``MAJ:MIN`` of a block device (what cgroup v1 blkio throttles take)."""
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
