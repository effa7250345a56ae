"""The share-group offset messages (KIP-932; Lag: KIP-1226) as kafka-python's JSON schemas, written from Kafka's
protocol guide (https://kafka.apache.org/protocol): kafka-python 3.0.12 knows their API keys, not their fields."""
