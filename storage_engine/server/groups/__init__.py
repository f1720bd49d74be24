"""The group coordinator: consumer groups (the classic protocol) and their committed offsets, kept as records in
the compacted ``__consumer_offsets`` topic in Kafka's key and value schemas (:mod:`.records`) and rebuilt from it
on start (:mod:`.store`); the states (:mod:`.state`), membership and rebalances (:mod:`.coordinator`), offsets
(:mod:`.offsets`)."""
