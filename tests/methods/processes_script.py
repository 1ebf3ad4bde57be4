"""Run by test_processes.py under torchrun: process 1 leaves without waiting, process 0 waits
at a stage's end and must say who waited for what."""

from __future__ import annotations

from datetime import timedelta

from coevo.run import processes

if __name__ == "__main__":
    processes.WAIT = timedelta(seconds=20)  # a hang is cut short here; a closed peer is at once
    procs = processes.start()
    if procs.rank == 1:
        raise SystemExit(0)  # gone, as a process that died would be
    procs.barrier("stage eval-0")
