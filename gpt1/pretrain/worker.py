"""Unsupervised pre-training of GPT-1 with DeepSpeed (paper sections 3.1 and 4.1): the worker.

    python -m gpt1.pretrain --config OUT/config.json --shards SHARDS --out OUT ...

One worker: what `gpt1 pretrain` (gpt1.pretrain.stage: validation before launch, then one process directly or N
through torchrun) and the multi-node launchers (torchrun, the deepspeed launcher; infra/multinode/) start.

A worker maximises the LM likelihood L1 = sum_i log P(u_i | u_{i-k..i-1}) over packed n_ctx-token blocks: AdamW
(decoupled weight decay on weights only), linear warmup then cosine to 0, gradient clipping, all through a DeepSpeed
engine whose config is derived from the same PretrainConfig (gpt1.pretrain.distributed). Every `eval_every` updates
it measures validation loss/perplexity and logs text samples, every `probe_every` the zero-shot probes
(gpt1.pretrain.probes), every `save_every` a resumable checkpoint (gpt1.pretrain.checkpoint), or each every so many
minutes instead (`*_every_minutes`, gpt1.pretrain.cadence); at the end the consolidated fp32 weights go to
OUT/final/ (GPT1.from_pretrained), with tokenizer.json and a transformers export in OUT/final/hf/.

Outputs:
    OUT/config.json              resolved config (written by `gpt1 pretrain`; read by every worker)
    OUT/deepspeed_config.json    the generated DeepSpeed config for this world size
    OUT/metrics.jsonl            one JSON line per update, per logging window (throughput) and per evaluation
                                 (rank 0; resumed runs append)
    OUT/samples/step-N.txt       text samples at each evaluation
    OUT/checkpoints/step-N/      resumable checkpoints (latest `keep_last` kept)
    OUT/curve/step-N/            the model at each update of `curve_steps` (weights, tokenizer, training.json)
    OUT/final/                   gpt1.safetensors, gpt1_config.json, tokenizer.json, hf/, training.json
    OUT/loss_curve.png

What the run starts from (resolved config, tokenizer, probe data, resume point, number of updates) is checked by
gpt1.pretrain.inputs, before launch and again here; what it wrote is read back and logged by gpt1.pretrain.outputs.

Design choices:
- Schedule and weight-decay groups: gpt1.model.optim (warmup then cosine to 0 at `total`; a torch LambdaLR that
  DeepSpeed steps and checkpoints).
- Logged loss = mean over the update's micro-batches and ranks; MLflow gets window means every `log_every`
  updates, metrics.jsonl every update. Validation uses the first eval_batches x global-batch blocks of the val
  split in stored order, the same blocks at every evaluation and for every world size.
- The loop waits for the device once per logging window (`log_every` updates, or sooner when an action is due):
  losses and gradient norms stay on the device until then, and the next batch is read and copied while the
  current update runs (gpt1.pretrain.feed). Throughput is measured per window, so it is real GPU time.
- Validation is shared by all ranks; text samples and probes run on rank 0 alone (every rank under ZeRO-3,
  whose forward pass gathers parameters collectively).
- The versions the numbers depend on (torch, CUDA, cuDNN, driver, NCCL, DeepSpeed, GPU) are `env.*` params.
- Dropout RNG is seeded per rank (seed + rank); model init uses `seed` on every rank. Evaluation, probes and
  samples never draw from the training RNG, so on a CPU a resumed run is bit-identical to an uninterrupted one
  (on CUDA the restored state is exact and later updates agree within a tolerance: docs/gpu.md).
- A worker started by a launcher stops when that launcher dies (gpt1.runtime.processes.exit_with_parent).
- OUT/final/training.json's `language_model` puts the final validation loss beside unigram and interpolated-bigram
  baselines fitted on the train split and scored on the same val blocks (gpt1.pretrain.ngram).
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from gpt1.config import PipelineConfig, config_from_dict, flatten
from gpt1.errors import PREEMPTED, Diverged, Preempted, exit_code
from gpt1.io import read_json, sha256_file, sha256_tree, write_json, write_text
from gpt1.model import optim
from gpt1.model.files import TRAINING_NAME
from gpt1.pretrain.cadence import Cadence
from gpt1.pretrain.inputs import (
    CHECKPOINTS,
    FINAL,
    check_curve_steps,
    curve_point,
    load_tokenizer,
    resolve_config,
    resume_point,
    task_data_source,
    total_steps,
)
from gpt1.pretrain.outputs import (
    MetricsLog,
    log_pretrained_model,
    plot_loss_curve,
    read_metrics,
    stage_key,
)
from gpt1.pretrain.preemption import StopRequest, write_notice
from gpt1.progress import duration
from gpt1.redact import redact
from gpt1.runtime.cuda import versions
from gpt1.runtime.processes import exit_with_parent, peak_rss_mb
from gpt1.stages.integrity import FOLDER_FIELD, folder_record

if TYPE_CHECKING:
    from tqdm import tqdm

    from gpt1.tracking.logger import RunLogger

log = logging.getLogger("gpt1.pretrain")

SAMPLE_PROMPTS = ("the old man looked at", "she opened the door and", "it was the first time that")
SAMPLE_TOKENS = 32
WORKER = (
    "gpt1 pretrain worker"  # prefix of a worker's one-line error, which the launching stage reports
)


# --------------------------------------------------------------------------------------------- a worker


class Window:
    """One logging window: its updates still on the device (`pending`: loss tensors, gradient norms, learning
    rates), those already read back (as floats), and the training time they took (other work excluded)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.pending: list[tuple[torch.Tensor, torch.Tensor | float | None, float]] = []
        self.losses: list[float] = []
        self.norms: list[float | None] = []
        self.lrs: list[float] = []
        self.started = time.perf_counter()

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor | float | None, lr: float) -> None:
        self.pending.append((loss, grad_norm, lr))

    def exclude(self, seconds: float) -> None:
        """Leave out time spent on other work (evaluation, probes, a checkpoint)."""
        self.started += seconds

    def seconds(self) -> float:
        return time.perf_counter() - self.started


class Pretraining:
    """One rank's training run: engine, data, evaluation, logging, checkpoints."""

    def __init__(self, cfg: PipelineConfig, args: argparse.Namespace, world):
        import deepspeed

        from gpt1.data.tokenize import BlockReader, load_manifest
        from gpt1.model.transformer import GPT1, flops_per_token
        from gpt1.pretrain.checkpoint import CheckpointManager, recut_needed
        from gpt1.pretrain.distributed import batch_layout, deepspeed_config, device_type

        self.args, self.world = args, world
        self.stop = (
            StopRequest.install()
        )  # first: a SIGTERM during start-up is acted on at the first boundary
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.shards = Path(args.shards)
        self.manifest = load_manifest(self.shards)
        self.cfg = cfg = resolve_config(cfg, self.manifest)
        p = cfg.pretrain
        self.device_kind = device_type()
        self.layout = batch_layout(p, world.size)
        self.ds_config = deepspeed_config(p, world.size, self.device_kind)
        resume_from = resume_point(self.out, args.resume, cfg.model.model_dump())
        if resume_from is not None and recut_needed(resume_from, world.size, p.zero_stage):
            # written by another number of processes: its ZeRO partitions are re-cut on load
            self.ds_config["checkpoint"] = {"load_universal": True}

        self.train_data = BlockReader(
            self.shards, "train", seed=p.seed, rank=world.rank, world_size=world.size
        )
        self.total = total_steps(p, len(self.train_data))
        if len(self.train_data) < p.global_batch_size or self.total < 1:
            raise ValueError(
                f"{self.shards}: {len(self.train_data)} train blocks, fewer than one global batch "
                f"of {p.global_batch_size}"
            )
        check_curve_steps(p, self.total)
        self.tokens_per_step = p.global_batch_size * cfg.model.n_ctx
        self.flops_per_token = flops_per_token(cfg.model)

        torch.manual_seed(p.seed)  # identical initial weights on every rank
        model = GPT1(cfg.model)
        if model.compile_for(
            self.device_kind
        ):  # before the engine wraps it; compiles at the first step
            log.info(
                "model.compile=%s: transformer blocks compiled with torch.compile",
                cfg.model.compile,
            )
        torch.manual_seed(p.seed + world.rank)  # per-rank dropout streams
        scheduler = functools.partial(
            optim.scheduler,
            warmup_steps=p.warmup_steps,
            total_steps=self.total,
            schedule=p.schedule,
        )
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model,
            model_parameters=optim.param_groups(model, p.weight_decay),
            config=self.ds_config,
            lr_scheduler=scheduler,
        )
        self.model = self.engine.module
        self.device = self.engine.device
        # Stage 0 fp32 is DeepSpeed's plain path, which clips without keeping the norm: measure it ourselves.
        self.norm_from_grads = p.zero_stage == 0
        # Text samples and probes read the whole model. Under ZeRO-3 its parameters are gathered collectively, so
        # every rank takes part; below that rank 0 runs them alone while the others wait at the next update.
        self.runs_diagnostics = world.is_main or p.zero_stage == 3
        self.cadence = {
            "eval": Cadence(p.eval_every, p.eval_every_minutes),
            "probe": Cadence(p.probe_every, p.probe_every_minutes),
            "save": Cadence(p.save_every, p.save_every_minutes),
        }
        self.window = Window()

        self.checkpoints = CheckpointManager(
            self.out / CHECKPOINTS, rank=world.rank, world_size=world.size, keep_last=p.keep_last
        )
        self.tokenizer = load_tokenizer(args.tokenizer, self.manifest)
        self.probe_data = {}
        if self.tokenizer is not None and self.runs_diagnostics:
            from gpt1.pretrain.probes import load_probe_data

            self.probe_data = load_probe_data(
                task_data_source(cfg, args.task_data), p.probe_max_examples, cfg.finetune.task_data
            )
        elif self.tokenizer is None:
            log.info("no --tokenizer: text samples and zero-shot probes are skipped")

        self.step, self.tokens_seen, self.run_id = 0, 0, None
        if resume_from is not None:
            meta = self.checkpoints.load(self.engine, resume_from, seed=p.seed)
            self.train_data.load_state_dict(meta["reader"])
            self.step, self.tokens_seen, self.run_id = (
                meta["step"],
                meta["tokens_seen"],
                meta.get("run_id"),
            )
            log.info("resumed from %s (update %d of %d)", resume_from, self.step, self.total)
        # after the last update trained (checkpoints save it)
        self.reader_state = self.train_data.state_dict()

        self.peak_flops, self.peak_source = None, ""
        self.run: RunLogger | None = None
        self.metrics: MetricsLog | None = None
        if world.is_main:
            from gpt1.model.mfu import device_peak_flops

            self.peak_flops, self.peak_source = device_peak_flops(self.device_kind, p.precision)
            self.metrics = MetricsLog(self.out / "metrics.jsonl")
            self._start_tracking(resumed=resume_from is not None)

    # -- tracking --------------------------------------------------------------------------------------
    def _start_tracking(self, resumed: bool) -> None:
        from gpt1.tracking.logger import INTERRUPTED, RunLogger
        from gpt1.tracking.runs import monitor_system, stage_tags

        # the config this run resolved to, credentials redacted (the tracking URI's come from the environment)
        write_json(self.out / "config.json", redact(self.cfg.model_dump(mode="json")))
        write_json(self.out / "deepspeed_config.json", self.ds_config)
        tags = {
            **stage_tags("pretrain", key=stage_key(self.out), preset=self.cfg.preset),
            "gpt1.shards": self.manifest.get("key", ""),
        }
        self.run = run = RunLogger(
            "pretrain",
            experiment=self.cfg.tracking.experiment,
            uri=self.cfg.tracking.tracking_uri,
            parent_run_id=self.args.parent_run_id,
            run_id=self.run_id,
            tags=tags,
            # a resumed attempt whose checkpoint names no run (written before the run existed) goes on with it
            continues=INTERRUPTED,
        )
        monitor_system(run)
        environment = {f"env.{name}": value for name, value in versions().items()}
        log.info(
            "environment: %s",
            ", ".join(f"{k.removeprefix('env.')} {v}" for k, v in environment.items()),
        )
        if resumed and self.run_id is not None:
            # params are already on the run (MLflow refuses to change a logged param); this start's are tags
            run.set_tags({"resumed_at_step": self.step, **environment})
            return
        run.log_params(
            {
                **flatten(self.cfg.model_dump(mode="json")),
                **environment,
                **flatten(self.ds_config, "deepspeed."),
                "world_size": self.world.size,
                "total_steps": self.total,
                "flops_per_token": self.flops_per_token,
                "peak_flops_per_device": self.peak_flops,
                "peak_flops_source": self.peak_source,
            }
        )
        run.log_dict(self.cfg.model_dump(mode="json"), "config.json")
        run.log_dict(self.ds_config, "deepspeed_config.json")
        run.log_dataset(
            "shards",
            self.manifest.get("key") or sha256_file(self.shards / "manifest.json"),
            str(self.shards.resolve()),
            context="training",
        )

    @property
    def run_id_now(self) -> str | None:
        return self.run.run_id if self.run is not None else self.run_id

    # Rank 0's outputs, which __init__ opens there: only rank 0 logs, so only its code paths use these two.
    @property
    def main_run(self) -> RunLogger:
        assert self.run is not None, "only rank 0 logs to MLflow"
        return self.run

    @property
    def metrics_log(self) -> MetricsLog:
        assert self.metrics is not None, "only rank 0 writes metrics.jsonl"
        return self.metrics

    def _record(self, record: dict) -> None:
        """One line of OUT/metrics.jsonl, on disk at once (rank 0)."""
        self.metrics_log.write(record)
        self.metrics_log.flush()

    # -- training ------------------------------------------------------------------------------------------
    def train_step(
        self, micro_batches: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | float | None]:
        """One optimizer update over this rank's (accum, micro, n_ctx+1) blocks: this rank's mean loss and the
        gradient norm, left on the device (nothing here waits for it; the logging window does, once)."""
        engine = self.engine
        total_loss = torch.zeros((), device=self.device)
        grad_norm = None
        for i, blocks in enumerate(micro_batches):
            blocks = blocks.to(self.device)  # already there when prefetched to a GPU
            loss = engine(blocks[:, :-1], targets=blocks[:, 1:]).loss
            # DeepSpeed divides by the accumulation steps and averages across ranks
            engine.backward(loss)
            if i == len(micro_batches) - 1 and self.norm_from_grads:
                grads = [p.grad for p in self.model.parameters() if p.grad is not None]
                grad_norm = torch.nn.utils.get_total_norm(grads)
            engine.step()  # an optimizer update only at the accumulation boundary
            total_loss += loss.detach()
        if grad_norm is None:
            grad_norm = engine.get_global_grad_norm()
        return total_loss / len(micro_batches), grad_norm

    def batches(self):
        """This rank's share of each global batch, epoch after epoch, on the device one update ahead."""
        from gpt1.pretrain.feed import prefetched

        def epochs():
            while True:
                yield from self.train_data.global_batches(
                    self.layout.global_batch, self.layout.micro_batch
                )

        return prefetched(epochs(), self.train_data, self.device)

    def run_loop(self) -> None:
        from tqdm import tqdm

        # disable=None: drawn on a terminal only (piped into Prefect logs, each redraw would be a record)
        bar = tqdm(
            total=self.total,
            initial=self.step,
            desc="pretrain",
            unit="step",
            disable=None if self.world.is_main else True,
        )
        log_every = self.cfg.pretrain.log_every
        actions = {
            "eval": self.evaluate,
            "probe": self.probe,
            "curve": self.write_curve_point,
            "save": self.save,
        }
        batches = self.batches()
        self.window.reset()
        while self.step < self.total:
            lr = self.scheduler.get_last_lr()[0]  # the rate this update uses
            blocks, self.reader_state = next(batches)
            loss, grad_norm = self.train_step(blocks)
            self.step += 1
            self.tokens_seen += self.tokens_per_step
            self.window.add(loss, grad_norm, lr)
            boundary = self.step % log_every == 0 or self.step == self.total
            due = self.due(boundary)
            if self.step in self.cfg.pretrain.curve_steps:
                due.add("curve")
            if boundary or due:
                self.drain()  # before a checkpoint too: the lines of the updates it holds are on disk first
            if boundary:
                self.log_window(bar)
            if due:
                started = time.perf_counter()
                for name in (
                    "eval",
                    "probe",
                    "curve",
                    "save",
                ):  # a curve point before the checkpoint that passes it
                    if name in due:
                        actions[name]()
                        if name in self.cadence:
                            self.cadence[name].ran()
                self.window.exclude(time.perf_counter() - started)
            if boundary and self.step < self.total and self.stop.agreed(self.device):
                self.stop_here(saved="save" in due)
        bar.close()

    def stop_here(self, saved: bool) -> None:
        """Asked to stop (gpt1.pretrain.preemption): the checkpoint of this update (unless one was just written),
        the notice the launcher reads, then Preempted."""
        from gpt1.pretrain.checkpoint import tag_for

        path = self.checkpoints.root / tag_for(self.step) if saved else self.save()
        if self.world.is_main:
            write_notice(self.out, self.step, path)
            log.warning(
                "stopped on request at update %d of %d: checkpoint %s; resume with --resume auto",
                self.step,
                self.total,
                path,
            )
        raise Preempted(f"stopped at update {self.step}")

    def due(self, boundary: bool) -> set[str]:
        """What runs after this update: every action at the end; an action counted in updates when its count is
        reached; one timed in minutes when rank 0's clock says so at a logging boundary (shared with every rank:
        the actions are collective)."""
        if self.step == self.total:
            return set(self.cadence)
        due = {name for name, cadence in self.cadence.items() if cadence.due_by_updates(self.step)}
        timed = [name for name, cadence in self.cadence.items() if cadence.timed]
        if boundary and timed:
            flags = torch.tensor(
                [self.cadence[name].due_by_time() for name in timed],
                dtype=torch.int32,
                device=self.device,
            )
            torch.distributed.broadcast(flags, src=0)
            due.update(name for name, flag in zip(timed, flags.tolist()) if flag)
        return due

    def drain(self) -> None:
        """Wait for the device: the pending updates' losses (averaged over ranks) and gradient norms are read back,
        checked for divergence and recorded in metrics.jsonl, one line per update."""
        window = self.window
        if not window.pending:
            return
        losses = torch.stack([loss for loss, _, _ in window.pending])
        torch.distributed.all_reduce(losses)
        losses = (losses / self.world.size).tolist()
        norms = [None if norm is None else float(norm) for _, norm, _ in window.pending]
        lrs = [lr for _, _, lr in window.pending]
        window.pending = []
        first = self.step - len(losses) + 1
        for step, loss, grad_norm, lr in zip(range(first, self.step + 1), losses, norms, lrs):
            if not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm)):
                raise Diverged(
                    f"pre-training diverged at update {step}: loss {loss}, gradient norm {grad_norm} "
                    f"(lr {lr:.3g}); {self.kept()}"
                )
            if self.metrics is not None:
                self.metrics.write({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm})
        if self.metrics is not None:
            self.metrics.flush()
        window.losses += losses
        window.norms += norms
        window.lrs += lrs

    def log_window(self, bar: tqdm) -> None:
        """Rank 0: the window's mean loss, last learning rate and gradient norm, and throughput, to MLflow and the
        log (call after `drain`); every rank then starts the next window."""
        from gpt1.model.mfu import mfu

        window, seconds = self.window, self.window.seconds()
        updates = len(window.losses)
        if self.world.is_main and updates:
            tokens_per_s = updates * self.tokens_per_step / seconds
            grad_norm = window.norms[-1]
            metrics = {
                "loss": sum(window.losses) / updates,
                "lr": window.lrs[-1],
                "grad_norm": grad_norm,
                "tokens_per_s": tokens_per_s,
                "tokens_seen": self.tokens_seen,
                "mfu": mfu(tokens_per_s, self.flops_per_token, self.peak_flops, self.world.size),
            }
            self._record(
                {
                    "step": self.step,
                    "tokens_per_s": tokens_per_s,
                    "mfu": metrics["mfu"],
                    "seconds_per_update": seconds / updates,
                }
            )
            self.main_run.log_metrics(metrics, step=self.step)
            bar.update(updates)
            bar.set_postfix(loss=f"{metrics['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            mfu_text = f"{100 * metrics['mfu']:.1f}%" if metrics["mfu"] is not None else "n/a"
            eta = (self.total - self.step) * seconds / updates
            log.info(
                "step %d/%d loss %.4f lr %.3g grad_norm %s tokens/s %.0f mfu %s ETA %s",
                self.step,
                self.total,
                metrics["loss"],
                metrics["lr"],
                "n/a" if grad_norm is None else f"{grad_norm:.3f}",
                tokens_per_s,
                mfu_text,
                duration(eta),
            )
        window.reset()

    # -- evaluation ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def validation_loss(self) -> float | None:
        """Mean LM loss over the first eval_batches global batches of the val split (stored order)."""
        from gpt1.data.tokenize import BlockReader

        reader = BlockReader(
            self.shards, "val", rank=self.world.rank, world_size=self.world.size, shuffle=False
        )
        n_batches = self.validation_blocks(len(reader)) // self.layout.global_batch
        if n_batches == 0:
            return None
        self.engine.eval()
        total = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss sum, token count
        steps = reader.global_batches(self.layout.global_batch, self.layout.micro_batch)
        for _ in range(n_batches):
            for blocks in next(steps):
                blocks = blocks.to(self.device)
                total[0] += self.engine(
                    blocks[:, :-1], targets=blocks[:, 1:], loss_average="sum"
                ).loss.double()
                total[1] += blocks[:, 1:].numel()
        self.engine.train()
        torch.distributed.all_reduce(total)
        return float(total[0] / total[1])

    def validation_blocks(self, available: int) -> int:
        """How many val blocks (the first, in stored order) validation averages over: whole global batches."""
        global_batch = self.layout.global_batch
        return min(self.cfg.pretrain.eval_batches, available // global_batch) * global_batch

    def evaluate(self) -> None:
        val_loss = self.validation_loss()
        samples = self.samples() if self.runs_diagnostics else None
        if not self.world.is_main:
            return
        if val_loss is None:
            log.warning("val split has fewer than one global batch of blocks: no validation loss")
        else:
            metrics = {"val_loss": val_loss, "val_ppl": math.exp(min(val_loss, 50.0))}
            self.main_run.log_metrics(metrics, step=self.step)
            self._record({"step": self.step, **metrics})
            log.info(
                "step %d: val loss %.4f, perplexity %.2f", self.step, val_loss, metrics["val_ppl"]
            )
        if samples:
            name = f"samples/step-{self.step:08d}.txt"
            write_text(self.out / name, samples)
            self.main_run.log_text(samples, name)

    def samples(self) -> str | None:
        """Continuations of SAMPLE_PROMPTS (top-k 40, temperature 0.8, fixed seed: comparable across evals)."""
        if self.tokenizer is None:
            return None
        from gpt1.model.generate import continue_text

        generator = torch.Generator().manual_seed(self.cfg.pretrain.seed)
        lines = []
        for prompt in SAMPLE_PROMPTS:
            text = continue_text(
                self.model,
                self.tokenizer,
                prompt,
                SAMPLE_TOKENS,
                temperature=0.8,
                top_k=40,
                generator=generator,
            )
            lines.append(f"[{prompt}] {text}")
        return f"step {self.step}\n" + "\n".join(lines) + "\n"

    def probe(self) -> None:
        if self.tokenizer is None or not self.runs_diagnostics:
            return
        from gpt1.pretrain.probes import run_probes

        started = time.perf_counter()
        results = run_probes(self.model, self.tokenizer, self.probe_data)
        if self.world.is_main:
            self.main_run.log_metrics(results, step=self.step)
            self._record({"step": self.step, **results})
            log.info(
                "step %d: zero-shot probes %s (%.1fs)",
                self.step,
                ", ".join(f"{k.split('/')[1]} {v:.1f}" for k, v in results.items()),
                time.perf_counter() - started,
            )

    # -- checkpoints and the end -------------------------------------------------------------------------------
    def kept(self) -> str:
        """What a run stopped by divergence leaves: the checkpoint to resume from, and no final model."""
        latest = self.checkpoints.latest_complete()
        where = (
            f"the last checkpoint, {latest}, is kept" if latest else "no checkpoint was written yet"
        )
        return (
            f"{where}; no final model written. Lower pretrain.lr or raise pretrain.warmup_steps, then resume "
            "(--resume auto) or start over"
        )

    def check_weights(self) -> None:
        """Refuse to checkpoint non-finite weights (an update can make them so with a finite loss before it)."""
        bad = [
            name
            for name, param in self.model.named_parameters()
            if not bool(torch.isfinite(param).all())
        ]
        if bad:
            raise Diverged(
                f"pre-training diverged at update {self.step}: {len(bad)} weight tensors hold NaN or "
                f"inf ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}); {self.kept()}"
            )

    def save(self) -> Path:
        self.check_weights()
        started = time.perf_counter()
        if self.world.is_main:
            # A resumed run replays only what follows this checkpoint: what the buffer holds from before it must
            # reach MLflow now, not seconds later (a kill in between would lose it for good).
            self.main_run.flush()
        meta = {
            "reader": self.reader_state,
            "tokens_seen": self.tokens_seen,
            "run_id": self.run_id_now,
            "total_steps": self.total,
            "model": self.cfg.model.model_dump(),
        }
        path = self.checkpoints.save(self.engine, self.step, meta)
        if self.world.is_main:
            log.info("checkpoint %s written in %.1fs", path, time.perf_counter() - started)
        return path

    def write_model(self, folder: Path):
        """The consolidated fp32 weights (gathered by every rank, from memory); rank 0 writes them with the
        tokenizer as a model folder (GPT1.from_pretrained) and returns the model; the other ranks None."""
        from gpt1.model.transformer import GPT1
        from gpt1.pretrain.checkpoint import consolidated_state_dict

        state = consolidated_state_dict(self.engine)
        if not self.world.is_main:
            return None
        with torch.device("meta"):
            model = GPT1(self.cfg.model)
        model.load_checked_state_dict(state, source=f"{self.out} at update {self.step}")
        model.save_pretrained(folder)
        if self.tokenizer is not None:
            self.tokenizer.save(folder)
        return model

    def write_curve_point(self) -> None:
        """The model at this update of pretrain.curve_steps, as OUT/curve/step-N: what the report's curve
        fine-tunes start from. Its training.json, written last, says how much pre-training it had."""
        from gpt1.model.transformer import WEIGHTS_NAME

        folder = self.out / curve_point(self.step)
        if self.write_model(folder) is None:
            return
        files = folder_record(folder)  # every file a reader of the model trusts, its config too
        write_json(
            folder / TRAINING_NAME,
            {
                "steps": self.step,
                "tokens_seen": self.tokens_seen,
                "weights_sha256": files[WEIGHTS_NAME],
                FOLDER_FIELD: files,
            },
        )
        log.info("curve point: the model at update %d in %s", self.step, folder)

    def finish(self) -> None:
        """OUT/final (every rank gathers the weights); then rank 0: the transformers export, training.json,
        artifacts, run end."""
        from gpt1.pretrain.checkpoint import tag_for

        final = self.out / FINAL
        model = self.write_model(final)
        if model is None:
            return
        from gpt1.model.convert import pretrained_by, save_hf_folder
        from gpt1.model.transformer import WEIGHTS_NAME

        checkpoint = self.out / CHECKPOINTS / tag_for(self.step)
        if (
            self.tokenizer is None
        ):  # a transformers folder without one loads a tokenizer that maps all text to 0
            log.warning(
                "no transformers export in %s: no --tokenizer (later: gpt1 convert --to hf %s --tokenizer "
                "TOK --out DIR)",
                final / "hf",
                final,
            )
        else:
            try:
                save_hf_folder(
                    model, self.tokenizer, final / "hf", pretrained_by(self.step, self.tokens_seen)
                )
            except (
                ValueError
            ) as err:  # a shape transformers' openai-gpt cannot express (e.g. d_ff != 4 x n_embd)
                log.warning("no transformers export in %s: %s", final / "hf", err)
        files = folder_record(final)  # every file a reader of the model trusts, its config too
        weights_sha256 = files[WEIGHTS_NAME]
        summary = {
            "steps": self.step,
            "tokens_seen": self.tokens_seen,
            "checkpoint": str(checkpoint),
            "shards": str(self.shards.resolve()),
            "shards_key": self.manifest.get("key"),
            "tokenizer_sha256": self.manifest.get("tokenizer_sha256"),
            "mlflow_run_id": self.run_id_now,
            "weights_sha256": weights_sha256,
            FOLDER_FIELD: files,
            "peak_rss_mb": peak_rss_mb(),
            "corpus": self.manifest.get("composition"),
        }
        language_model = self.language_model()
        if language_model is not None:
            summary["language_model"] = language_model
        write_json(final / TRAINING_NAME, summary)
        log.info("final weights: %s", final)

        self.metrics_log.flush()
        run = self.main_run
        curve = plot_loss_curve(self.out / "metrics.jsonl", self.out / "loss_curve.png")
        if curve is not None:
            run.log_artifact(curve)
        if self.cfg.tracking.upload_checkpoints:
            run.log_artifact(final, "final")
        else:
            run.log_reference("final", final, sha256_tree(final))
            run.log_artifact(final / TRAINING_NAME, "final")
        log_pretrained_model(run, final, self.cfg, self.step, weights_sha256)
        run.end("FINISHED")

    def language_model(self) -> dict | None:
        """Rank 0: the final validation loss (as evaluate() recorded it) beside unigram and interpolated-bigram
        baselines fitted on the train split and scored on the same val blocks (gpt1.pretrain.ngram)."""
        from gpt1.pretrain.ngram import baselines_for_shards, describe, language_model_summary

        val_loss = read_metrics(self.out / "metrics.jsonl").get(self.step, {}).get("val_loss")
        val_blocks = self.validation_blocks(self.manifest["splits"]["val"]["rows"])
        if val_loss is None or val_blocks == 0:
            log.warning(
                "no validation loss at update %d: no n-gram baselines in training.json", self.step
            )
            return None
        started = time.perf_counter()
        try:
            summary = language_model_summary(
                val_loss, baselines_for_shards(self.shards, val_blocks)
            )
        except (
            ValueError
        ) as err:  # e.g. too few train blocks to fit and hold out: the model itself is fine
            log.warning("no n-gram baselines in training.json: %s", err)
            return None
        self.main_run.log_metrics(
            {
                f"lm/{name}": summary[name]
                for name in (
                    "val_loss",
                    "unigram_loss",
                    "bigram_loss",
                    "bigram_weight",
                    "beats_bigram_by",
                )
            },
            step=self.step,
        )
        log.info("%s (n-gram baselines in %.1fs)", describe(summary), time.perf_counter() - started)
        return summary


# ---------------------------------------------------------------------------------- worker entry point


def worker_parser() -> argparse.ArgumentParser:
    # No option may prefix a launcher's own (torchrun/deepspeed would take `--d...`/`--n...` abbreviations).
    parser = argparse.ArgumentParser(
        prog="python -m gpt1.pretrain", description="one pre-training worker"
    )
    parser.add_argument(
        "--config",
        required=True,
        help="resolved config JSON (gpt1 pretrain writes OUT/config.json)",
    )
    parser.add_argument("--shards", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--resume", help="'auto' (latest complete checkpoint) or a checkpoint directory"
    )
    parser.add_argument(
        "--tokenizer", help="tokenizer folder: text samples, probes, OUT/final/tokenizer.json"
    )
    parser.add_argument("--task-data", help="folder of task folders for the zero-shot probes")
    parser.add_argument("--parent-run-id", help="MLflow parent run (pipeline nesting)")
    parser.add_argument(
        "--local_rank", "--local-rank", type=int, help="set by the deepspeed launcher; unused"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    exit_with_parent()  # the launcher (gpt1 pretrain, a pipeline) died: stop training, release the output
    args = worker_parser().parse_args(argv)
    # as the launcher set it; joining the world may itself fail (no CUDA)
    rank = os.environ.get("RANK", "0")
    return exit_code(lambda: start(args), prefix=f"{WORKER} (rank {rank})")


def start(args: argparse.Namespace) -> int:
    from gpt1.pretrain.distributed import device_type, init_world, leave_world

    device_type()  # first: a GPU job without working CUDA stops here, before anything is read
    cfg = config_from_dict(read_json(args.config))
    world = init_world(
        cfg.pretrain.collective_timeout_minutes, Path(args.out) / "nccl-trace" / "rank_"
    )
    logging.basicConfig(
        level=logging.INFO if world.is_main else logging.WARNING,
        format=f"%(asctime)s %(levelname)s rank{world.rank} %(name)s: %(message)s",
    )
    code = train(cfg, args, world)
    leave_world()  # an orderly end (done or preempted): a failure leaves through the launcher's teardown
    return code


def train(cfg: PipelineConfig, args: argparse.Namespace, world) -> int:
    training = Pretraining(cfg, args, world)
    try:
        training.run_loop()
        training.finish()
    except Preempted:
        if training.run is not None:
            training.run.end("KILLED")  # reopened by the resumed run
        return PREEMPTED
    except BaseException:
        if training.run is not None:
            training.run.end("FAILED")
        raise
    finally:
        if training.metrics is not None:
            training.metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
