"""What a pre-training run wrote, read back and logged: metrics.jsonl, the loss curve, the pre-trained model as an
MLflow logged model, and the child run that stands for a pre-training an earlier flow run did (a cached re-run).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpt1.config import PipelineConfig, config_from_dict, flatten
from gpt1.io import read_json, size_on_disk
from gpt1.model.files import TRAINING_NAME
from gpt1.pretrain.inputs import FINAL
from gpt1.stages.outputs import IDENTITY
from gpt1.tracking.logger import RunLogger, start_run
from gpt1.tracking.models import log_files_model

# bytes: a larger model folder is logged by reference unless uploads are asked for
MODEL_UPLOAD_LIMIT = 200 * 2**20


def stage_key(out: Path) -> str | None:
    """The content key of the stage output this worker writes (its `.stage.json`), if a stage started it."""
    try:
        return read_json(out / IDENTITY).get("key")
    except (OSError, ValueError, AttributeError):
        return None


def last_metrics(path: Path) -> dict[str, float]:
    """The latest value of every metric in metrics.jsonl (training loss, validation, probes): what the finished
    run reports."""
    latest: dict[str, float] = {}
    for _, record in sorted(read_metrics(path).items()):
        latest.update(
            {
                k: v
                for k, v in record.items()
                if k not in ("step", "seconds")
                and isinstance(v, (int, float))
                and not isinstance(v, bool)
            }
        )
    return latest


def log_pretrained_model(
    run: RunLogger, final: Path, cfg: PipelineConfig, step: int, weights_sha256: str
) -> None:
    """The transformers export `final/hf` as the logged model `pretrained` of the run, with the model config as
    params and the metrics of the last update (`step`) linked to it: uploaded when `tracking.upload_checkpoints` or
    smaller than `MODEL_UPLOAD_LIMIT`, else recorded by location and hash (an external model)."""
    hf = final / "hf"
    if not hf.is_dir():
        return
    upload = cfg.tracking.upload_checkpoints or (size_on_disk(hf) or 0) <= MODEL_UPLOAD_LIMIT
    log_files_model(
        run,
        "pretrained",
        hf,
        upload=upload,
        model_type="gpt1-pretrained",
        step=step,
        params={f"model.{k}": v for k, v in cfg.model.model_dump().items()},
        tags={"gpt1.preset": cfg.preset, "gpt1.weights_sha256": weights_sha256},
    )


def log_finished(
    out: str | os.PathLike,
    *,
    parent_run_id: str | None,
    experiment: str,
    tracking_uri: str | None,
    tags: dict[str, str],
) -> str | None:
    """A child run for a pre-training that an earlier run did (a cached re-run): the config it resolved to, its
    recorded final metrics (metrics.jsonl, final/training.json), tagged `gpt1.source_run_id` (the run that trained,
    holding the curves and the logged model). Returns the new run's id."""
    out = Path(out)
    cfg = config_from_dict(read_json(out / "config.json"))
    summary = read_json(out / FINAL / TRAINING_NAME)
    run_tags = {**tags, "gpt1.shards": summary.get("shards_key") or ""}
    if summary.get("mlflow_run_id"):
        run_tags["gpt1.source_run_id"] = summary["mlflow_run_id"]
    with start_run(
        "pretrain",
        experiment=experiment,
        uri=tracking_uri,
        parent_run_id=parent_run_id,
        tags=run_tags,
    ) as run:
        run.log_params(flatten(cfg.model_dump(mode="json")))
        run.log_metrics(
            {**last_metrics(out / "metrics.jsonl"), "tokens_seen": summary["tokens_seen"]},
            step=summary["steps"],
        )
        run.log_artifact(out / FINAL / TRAINING_NAME, "final")
    return run.run_id


class MetricsLog:
    """OUT/metrics.jsonl, held open for appending by rank 0: lines reach the file at `flush` (every logging window
    and checkpoint), not through an open and a close per update."""

    def __init__(self, path: Path):
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run, closed by close()

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def read_metrics(path: Path) -> dict[int, dict]:
    """metrics.jsonl -> {step: merged record}; a resumed run's later lines win (same values when exact)."""
    by_step: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                by_step.setdefault(record["step"], {}).update(record)
    return by_step


def plot_loss_curve(metrics_path: Path, out: Path) -> Path | None:
    """OUT/loss_curve.png: train loss per update and validation loss per evaluation (None before any update)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_step = read_metrics(metrics_path)
    train = sorted((s, r["loss"]) for s, r in by_step.items() if "loss" in r)
    val = sorted((s, r["val_loss"]) for s, r in by_step.items() if "val_loss" in r)
    if not train:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(*zip(*train), label="train loss", linewidth=1)
    if val:
        ax.plot(*zip(*val), "o-", label="val loss")
    ax.set_xlabel("update")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("GPT-1 pre-training")
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
