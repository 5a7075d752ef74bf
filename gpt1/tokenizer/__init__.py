"""The GPT-1 text encoder: `gpt1.tokenizer.load(DIR)`, `gpt1.tokenizer.from_openai(...)`, `gpt1.tokenizer.train`.

The encoder and its training are in bpe.py; the `train-tokenizer` stage (gpt1/data/train_tokenizer/) runs the
training, and everything that reads text as token ids (tokenize, pretrain, finetune, serving, convert) loads it
from here.
"""

from gpt1.tokenizer.bpe import TOKENIZER_FILE, GPT1Tokenizer, from_openai, load, train

__all__ = ["TOKENIZER_FILE", "GPT1Tokenizer", "from_openai", "load", "train"]
