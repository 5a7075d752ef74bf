"""Corpus ingestion and Arrow shards (writer and training reader); the offline sample data is `gpt1.sample_data`."""
