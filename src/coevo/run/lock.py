"""One writer per run directory: an OS lock on `<run_dir>/.lock`, held while a run writes.

Two processes writing one set of checkpoints, manifests and store rows could interleave into
a state no single run produced, so a second writer is refused at once rather than queued.
The lock is `flock`, which the kernel drops when the holding process exits however it exits
(kill -9 included): a lock is never stale, and the rerun after a kill resumes as before.
Readers (`coevo compare`, `coevo export`) take no lock: they read only manifests, which are
written last and atomically, and committed store rows.

The file itself is never deleted: a process may have opened it and be waiting to lock it, and
deleting it would let that process and a newcomer each lock a different file of one name.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from coevo.run.pipeline import RunDirError

FILENAME = ".lock"


class RunLock:
    """The exclusive lock on one run directory; `release` (or leaving `with`) lets the next in."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir = run_dir
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # Empty first, so the file never names a process that no longer holds it.
        os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the last descriptor drops the flock
        self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def lock_run_dir(run_dir: str | Path) -> RunLock:
    """Take `run_dir`'s lock (making the directory), or raise RunDirError naming its holder."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # os.open descriptors are not inherited by subprocesses (PEP 446), so a JVM or any other
    # child left behind by a killed run cannot keep holding the directory.
    fd = os.open(run_dir / FILENAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        who = f"process {holder}" if holder.isdigit() else "another process"
        raise RunDirError(
            f"{str(run_dir)!r} is in use by {who} (a coevo run writing it): wait for it to end "
            "or stop it, or use another --out."
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunLock(run_dir, fd)
