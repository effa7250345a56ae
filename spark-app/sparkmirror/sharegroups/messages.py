"""DescribeShareGroupOffsets (key 90) and AlterShareGroupOffsets (key 91) as kafka-python messages: kafka-python
3.0.12 knows the keys but has no classes for them, so ours are made from JSON schemas of our own (`schemas/`)
by its generator, and go through its version negotiation and response registry like its built-in ones."""
from __future__ import annotations

from kafka.protocol.admin.groups import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.api_message import ApiMessage

from . import schemas

__all__ = ["AlterShareGroupOffsetsRequest", "AlterShareGroupOffsetsResponse", "DescribeShareGroupOffsetsRequest",
           "DescribeShareGroupOffsetsResponse", "ListGroupsRequest", "ListGroupsResponse"]

# module-level names keep the classes alive: kafka-python's response registry holds only weak proxies


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass
