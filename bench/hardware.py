"""What a figure was measured on: the CPU model and torch's thread count, or the GPU's name."""

import platform
from pathlib import Path

import torch

from engine.training import pick_device


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def hardware() -> dict:
    """The device training picks, with the GPU's name (on CUDA) or the CPU's model and torch's threads."""
    device = pick_device()
    found = {"device": device.type, "cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__}
    if device.type == "cuda":
        found["gpu"] = torch.cuda.get_device_name(device)
    return found
