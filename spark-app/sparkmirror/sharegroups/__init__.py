"""Share groups (KIP-932) carried across a mirror: their start offsets read on the source, translated through the
offset map and set on the target, with the group configs set on the source group. kafka-python carries the
offsets' requests (`messages`, over `wire.cluster.Wire`): neither librdkafka nor confluent-kafka has a
share-group admin API; confluent-kafka's AdminClient carries the configs (`configs`: ConfigResource GROUP)."""
