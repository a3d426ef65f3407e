"""Write three events and read them back through a reader group (the 20-line quick start)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.testing.embedded_redis import redis_server

with redis_server() as server, StreamManager.from_url(server.url) as streams:
    streams.create_scope("shop")
    streams.create_stream("shop", "orders")
    with EventStreamClientFactory.from_url("shop", server.url) as factory:
        writer = factory.create_event_writer("orders", UTF8StringSerializer())
        for order in ("apple", "pear", "plum"):
            writer.write_event(order, routing_key="customer-7").result(timeout=5)
        with ReaderGroupManager.from_url("shop", server.url) as groups:
            groups.create_reader_group("billing", ReaderGroupConfig(streams=["shop/orders"]))
        with factory.create_reader("r1", "billing", UTF8StringSerializer()) as reader:
            for _ in range(3):
                event = reader.read_next_event(timeout=5)
                print(event.event, event.routing_key, event.position)
