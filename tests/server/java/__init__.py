"""Kafka's own Java client (kafka-clients) driven from the tests: the worker's source, its build, and the
restart trials that compare it with librdkafka."""
