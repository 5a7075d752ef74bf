"""The model component: GPT-1 and its task heads (transformer.py, one file), the objectives (losses.py), the
optimizer and schedules (optim.py), text generation, weight interop (convert.py) and FLOP accounting (mfu.py).

`gpt1.model.GPT1` is the public name of the model.
"""

from gpt1.model.transformer import GPT1, GPT1ForTask

__all__ = ["GPT1", "GPT1ForTask"]
