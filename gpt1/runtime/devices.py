"""Which torch device a `--device` option names, checked before anything runs on it.

torch accepts a device string it cannot use (`cuda` in a CPU-only build, `cuda:3` on a one-GPU machine, `meta`)
and fails later, deep in a model call, with an assertion; here such a choice is one line naming the option.
"""

from __future__ import annotations

import torch

from gpt1.runtime.cuda import training_device

USABLE = ("cpu", "cuda", "mps")


def torch_device(name: str | None, what: str = "training") -> torch.device:
    """The device `name` names, ValueError when this machine lacks it; None: cuda when `what` can run there, else
    cpu (and a job that requires CUDA stops here: gpt1.runtime.cuda.require_cuda)."""
    if name is None:
        return torch.device(training_device(what))
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"--device {name!r}: not a torch device; use one of cpu, cuda, cuda:N, mps"
        ) from None
    if device.type not in USABLE:
        raise ValueError(f"--device {name!r}: models run on {', '.join(USABLE)}, not {device.type}")
    if device.type == "cuda":
        if torch.version.cuda is None:
            raise ValueError(
                f"--device {name!r}: this torch ({torch.__version__}) is a CPU-only build"
            )
        count = torch.cuda.device_count()
        if count == 0 or (device.index or 0) >= count:
            raise ValueError(f"--device {name!r}: this machine has {count} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name!r}: MPS is not available on this machine")
    return device
