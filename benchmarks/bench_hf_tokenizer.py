"""The transformers export of the tokenizer: how often AutoTokenizer gives our ids on real text, and what it costs.

On paragraphs sampled evenly from every shared book, with the original GPT-1 vocabulary, each variant encodes the
sample and is compared with ours (`GPT1Tokenizer.encode_batch`: ftfy in Python, then the Rust pipeline). Cost is
the CPU time of one thread (process time: on a shared machine wall time mostly measures the neighbours), variants in
alternating rounds, the best round counts.
    as is           our tokenizer.json in transformers unchanged (`PreTrainedTokenizerFast(tokenizer_file=...)`)
    export          what `bpe.save_transformers` writes: ftfy's context-free fixes in the normalizer
    export - maps   the export without ftfy's ligature and fullwidth maps (248 one-character replacements)
    ftfy first      the export on text passed through `ftfy.fix_text` beforehand (the documented way to full parity)

    python benchmarks/bench_hf_tokenizer.py [--every 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"  # read once, when tokenizers starts its pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPT1_SHARED_DATA", REPO.parent / "shared" / "data"))
sys.path.insert(0, str(REPO / "tests"))

from gpt1_oracle import book_paragraphs  # noqa: E402
from results import record  # noqa: E402


def without_character_maps(folder: Path) -> Path:
    """A copy of the export whose normalizer skips ftfy's ligature and fullwidth maps (its first steps)."""
    from ftfy import chardata

    spec = json.loads((folder / "tokenizer.json").read_text())
    maps = len(chardata.LIGATURES) + len(chardata.WIDTH_MAP)
    assert all(step["type"] == "Replace" for step in spec["normalizer"]["normalizers"][:maps])
    spec["normalizer"]["normalizers"] = spec["normalizer"]["normalizers"][maps:]
    copy = folder.with_name(folder.name + "-no-maps")
    copy.mkdir()
    for name in ("config.json", "tokenizer_config.json"):
        (copy / name).write_text((folder / name).read_text())
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=5, help="every k-th paragraph of every book")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import ftfy
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from gpt1.tokenizer import bpe

    vocab = SHARED / "openai-gpt1"
    ours = bpe.from_openai(vocab / "encoder_bpe_40000.json", vocab / "vocab_40000.bpe")
    paragraphs = [p for book in sorted((SHARED / "books").glob("*.txt")) for p in book_paragraphs(book)[:: args.every]]
    fixed = [ftfy.fix_text(p) for p in paragraphs]
    expected = ours.encode_batch(paragraphs)

    tmp = Path(tempfile.mkdtemp(prefix="bench-hf-tokenizer-"))
    export = tmp / "export"
    bpe.save_transformers(ours, export, model_max_length=512)
    (export / "config.json").write_text(json.dumps({"model_type": "openai-gpt"}))  # as in a model folder
    variants = {
        "as is": (PreTrainedTokenizerFast(tokenizer_file=str(ours.save(tmp / "plain"))), paragraphs),
        "export": (AutoTokenizer.from_pretrained(export), paragraphs),
        "export - maps": (AutoTokenizer.from_pretrained(without_character_maps(export)), paragraphs),
        "ftfy first": (AutoTokenizer.from_pretrained(export), fixed),
    }
    agree = {name: sum(a == b for a, b in zip(tok(texts, add_special_tokens=False)["input_ids"], expected))
             for name, (tok, texts) in variants.items()}

    best = dict.fromkeys(["ours", *variants], float("inf"))
    for _ in range(args.rounds):
        start = time.process_time()
        ours.encode_batch(paragraphs)
        best["ours"] = min(best["ours"], time.process_time() - start)
        for name, (tok, texts) in variants.items():
            start = time.process_time()
            tok(texts, add_special_tokens=False)
            best[name] = min(best[name], time.process_time() - start)

    chars = sum(map(len, paragraphs))
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"{len(paragraphs):,} paragraphs ({chars:,} characters) from {len(list((SHARED / 'books').glob('*.txt')))} "
          f"books, every {args.every}th; 1 thread; best of {args.rounds} rounds; load: {load}")
    print("| variant | paragraphs with our ids | encode CPU time | vs ours |")
    print("|---|---:|---:|---:|")
    print(f"| ours (ftfy + Rust) | {len(paragraphs):,} (100%) | {best['ours']:.2f} s | 1.00 |")
    for name in variants:
        share = 100 * agree[name] / len(paragraphs)
        extra = " (+ ftfy's own time)" if name == "ftfy first" else ""
        print(f"| {name} | {agree[name]:,} ({share:.2f}%) | {best[name]:.2f} s{extra} | "
              f"{best[name] / best['ours']:.2f} |")
    keys = {"as is": "as_is", "export": "export", "export - maps": "export_without_maps", "ftfy first": "ftfy_first"}
    record({"paragraphs": len(paragraphs),
            **{f"{keys[name]}.same_ids_pct": 100 * agree[name] / len(paragraphs) for name in variants},
            **{f"{keys[name]}.cpu_vs_ours": best[name] / best["ours"] for name in variants}})


if __name__ == "__main__":
    main()
