"""The local test ground: real KRaft Kafka clusters and a real Kubernetes API server on loopback."""
