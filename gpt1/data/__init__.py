"""Corpus ingestion, the offline sample-data generator, and Arrow shards (writer and training reader)."""
