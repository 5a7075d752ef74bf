"""`model.compile`: which devices compile, that compiling changes no parameter name, that compiled and eager
training agree, and that variable lengths do not recompile without bound (a compiled pre-training run killed and
resumed: tests/integration/test_compile_runs.py).

Tolerance of compiled vs eager (fp32, dropout masks from the same RNG: inductor's `fallback_random`): losses to
1e-5 relative, parameters after three AdamW updates to 1e-4 absolute. Inductor fuses and reorders the reductions
(LayerNorm, softmax, GELU), so results differ in the last bits of fp32, and AdamW's normalised update carries
those differences into the weights.

The first compile of a process costs tens of seconds on a CPU (C++ kernels built by inductor, cached on disk in
its cache directory for the next process), so the in-process checks share one compiled model.
"""

from __future__ import annotations


import pytest
import torch
from safetensors.torch import load_file
from torch._dynamo.utils import counters

from gpt1.config import ModelConfig
from gpt1.model.transformer import GPT1, WEIGHTS_NAME

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, n_embd=32, d_ff=64)


@pytest.mark.parametrize("setting, device, compiled", [
    ("auto", "cpu", False), ("auto", "cuda", True), (True, "cpu", True), (False, "cuda", False)])
def test_switch_decides_per_device_and_keeps_parameter_names(setting, device, compiled, tmp_path):
    model = GPT1(ModelConfig(**TINY, compile=setting))
    names = list(model.state_dict())
    assert model.compile_for(device) is compiled  # torch.compile is lazy: nothing is built until a call
    assert list(model.state_dict()) == names  # no `_orig_mod.` prefixes in checkpoints
    model.save_pretrained(tmp_path)
    assert sorted(load_file(str(tmp_path / WEIGHTS_NAME))) == sorted(names)
    assert GPT1.from_pretrained(tmp_path, compile=False).config.compile is False  # a load-time override


@pytest.fixture(scope="module")
def trained_pair():
    """The same tiny model trained 3 AdamW updates eagerly and compiled, dropout on (same masks)."""
    cfg = ModelConfig(**TINY, compile=True)
    torch.manual_seed(0)
    eager, compiled = GPT1(cfg), GPT1(cfg)
    compiled.load_state_dict(eager.state_dict())
    assert compiled.compile_for("cpu")
    batch = torch.randint(0, 61, (4, 17), generator=torch.Generator().manual_seed(1))
    curves = {}
    counters.clear()
    with torch._inductor.config.patch(fallback_random=True):  # inductor draws dropout masks as eager does
        for name, model in (("eager", eager), ("compiled", compiled)):
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            curves[name] = []
            for step in range(3):
                torch.manual_seed(10 + step)
                loss = model(batch[:, :-1], targets=batch[:, 1:]).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                curves[name].append(loss.item())
    return eager, compiled, curves, batch


def test_compiled_training_agrees_with_eager(trained_pair):
    eager, compiled, curves, _ = trained_pair
    assert curves["compiled"] == pytest.approx(curves["eager"], rel=1e-5)
    assert curves["eager"][2] < curves["eager"][0]  # the updates did something
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4, msg=name)


def test_variable_lengths_compile_one_dynamic_graph_per_mode(trained_pair):
    """Fine-tuning batches differ in length: after the first recompile the length is symbolic (torch's automatic
    dynamic shapes), so each mode (training, evaluation) holds at most two graphs however many lengths come."""
    _, compiled, _, batch = trained_pair
    before = counters["stats"]["unique_graphs"]
    for T in (5, 7, 9, 11, 13, 15):
        compiled(batch[:, :T], targets=batch[:, 1:T + 1]).loss.backward()
    training = counters["stats"]["unique_graphs"] - before
    compiled.eval()
    with torch.no_grad():
        for T in (5, 7, 9, 11, 13, 15):
            compiled(batch[:, :T])
    evaluation = counters["stats"]["unique_graphs"] - before - training
    assert training <= 1 and 1 <= evaluation <= 2  # training's static-length graph exists already
