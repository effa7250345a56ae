"""Share groups (KIP-932) carried across a mirror: their start offsets read on the source, translated through the
offset map and set on the target. kafka-python carries the requests (`messages`, over `wire.cluster.Wire`):
neither librdkafka nor confluent-kafka has a share-group admin API."""
