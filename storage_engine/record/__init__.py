"""Record formats (Kafka's ``common.record``): magic 2 batches, legacy magic 0/1 messages, codecs."""
