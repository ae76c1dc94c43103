"""The machine a measurement ran on: its CPU, cores, memory and library versions."""
import platform
from pathlib import Path
from typing import Dict


def machine_description() -> Dict[str, object]:
    """CPU, cores, memory and library versions of this machine."""
    import os

    import spacy
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb, "gpu": torch.cuda.is_available(),
        "python": platform.python_version(), "torch": torch.__version__, "spacy": spacy.__version__,
        "transformers": transformers.__version__, "threads": torch.get_num_threads(),
    }
