"""Two CPU processes under torchrun, as a multi-GPU run is launched, for the tests that compare
them with one process.

Each launch rendezvouses on a free port of its own (`--standalone`), so a second test run on the
same machine cannot join it, and keeps each process's whole log: a failure shows every rank's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def environment(**extra: str) -> dict[str, str]:
    """The launched processes' environment: one torch thread each, accelerate on the CPU
    (gloo: the same DDP code path `accelerate launch` takes on GPUs), the checkout importable.

    No GPU is visible to them: ACCELERATE_USE_CPU alone picks gloo, but accelerate's
    `wait_for_everyone` still passes `device_ids=[local rank]` to torch's barrier, which puts
    them on the machine's accelerator, and with fewer GPUs than processes ("invalid device
    ordinal") or any GPU at all the run would differ from the CPU one these tests compare."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "ACCELERATE_USE_CPU": "true",
        "CUDA_VISIBLE_DEVICES": "",
        **extra,
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def launch(args: list[str], logs: Path, *, processes: int = 2, timeout: float = 900) -> None:
    """Run `python args...` as `processes` processes; on failure, fail with every rank's log."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(processes),
        "--log-dir",
        str(logs),
        "--tee",
        "3",
        *args,
    ]
    done = run(command, timeout)
    if done.returncode != 0:
        ranks = sorted(logs.rglob("*.log"))
        shown = "\n".join(
            f"--- {p.relative_to(logs)}:\n{p.read_text(errors='replace')}" for p in ranks
        )
        raise AssertionError(
            f"{processes} processes exited {done.returncode}.\n{shown}\n"
            f"--- launcher stderr:\n{done.stderr}"
        )


def single(args: list[str], timeout: float = 900) -> None:
    """Run `python args...` as one process, with the launched processes' environment."""
    done = run([sys.executable, *args], timeout)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"


def run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=timeout
    )
