"""The GPT-1 text encoder under its public name: `gpt1.tokenizer.load(DIR)`, `gpt1.tokenizer.from_openai(...)`.

It is written by the `train-tokenizer` stage and lives beside it, in gpt1/data/train_tokenizer/bpe.py.
"""

from gpt1.data.train_tokenizer.bpe import TOKENIZER_FILE, GPT1Tokenizer, from_openai, load, train

__all__ = ["TOKENIZER_FILE", "GPT1Tokenizer", "from_openai", "load", "train"]
