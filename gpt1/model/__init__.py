"""The model component: GPT-1 and its task heads (transformer.py, one file), the objectives (losses.py), the
optimizer and schedules (optim.py), text generation, weight interop (convert.py) and FLOP accounting (mfu.py).

`gpt1.model.GPT1` is the public name of the model; it is imported on first use, so the light modules here
(files.py) import without torch.
"""

__all__ = ["GPT1", "GPT1ForTask"]


def __getattr__(name: str):
    if name in __all__:
        from gpt1.model import transformer

        return getattr(transformer, name)
    raise AttributeError(f"module 'gpt1.model' has no attribute {name!r}")
