"""What every benchmark records about the machine it ran on, and which device it runs on."""

from __future__ import annotations

import os
import platform
from pathlib import Path

DEVICES = ("cpu", "cuda")
RESULTS_DIR = Path(__file__).parent / "results"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str:
    """The name of the GPU a cuda run uses (`torch.cuda.get_device_name`)."""
    import torch

    return torch.cuda.get_device_name()


def describe(device: str = "cpu") -> str:
    """CPU model and cores, OS, Python and torch versions, and the load average now; on cuda
    also the GPU's name and memory and torch's CUDA version."""
    try:
        import torch

        torch_version = f", torch {torch.__version__}"
    except ImportError:
        torch_version = ""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    gpu = ""
    if device == "cuda":
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        gpu = f"; GPU {gpu_name()} ({total / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}{torch_version}{gpu}; load average (1/5/15 min) {load}"
    )


def check_device(device: str) -> None:
    """Stop with one sentence when `device` cannot run here (cuda without a CUDA GPU)."""
    if device not in DEVICES:
        raise SystemExit(f"--device must be one of {', '.join(DEVICES)}, got {device!r}.")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(
                "--device cuda needs a CUDA GPU that torch can see, and this machine has none "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False): run with "
                "--device cpu, or on a GPU machine."
            )


def results_file(name: str, device: str) -> Path:
    """Where a benchmark records its runs: `results/NAME.md` on the CPU (as always), and a file
    of its own per other device (`results/NAME-cuda.md`), so CPU and GPU figures never mix."""
    return RESULTS_DIR / (f"{name}.md" if device == "cpu" else f"{name}-{device}.md")
