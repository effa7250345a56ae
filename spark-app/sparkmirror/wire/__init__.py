"""Kafka's wire protocol over kafka-python, for what librdkafka has no API for: the batch path's record batches
as bytes (`copying/`) and the share-group admin (`sharegroups/`). Nothing here knows either of them.

- `settings`: a cluster's librdkafka client settings in kafka-python's names (`wire_config`);
- `connection`: one broker's blocking socket for requests encoded by hand (`BrokerConnection`, `WireError`);
- `cluster`: a cluster's connections (`Wire`): kafka-python's manager for the rare requests, `BrokerConnection`s
  for the rest;
- `protocol`: the framing those hand-encoded requests share (header, strings, arrays, `Cursor`, `pick`).

No re-exports here: `protocol` stays pure (no kafka-python) for whoever imports only it.
"""
