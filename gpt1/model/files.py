"""The names of a model folder's files, importable without torch (the recipe and the CLI's help read them)."""

# Our own file names: transformers' names (model.safetensors, config.json) in our layout made
# `OpenAIGPTLMHeadModel.from_pretrained` load such a folder with its block weights missing and no error. Folders written
# under those names by earlier versions still load (`model_files`); `gpt1.model.convert` writes the transformers layout.
WEIGHTS_NAME = "gpt1.safetensors"
CONFIG_NAME = "gpt1_config.json"
# beside weights gpt1 pretrain wrote: their pre-training (steps, tokens_seen), written last
TRAINING_NAME = "training.json"
EARLIER_WEIGHTS_NAME, EARLIER_CONFIG_NAME = "model.safetensors", "config.json"
