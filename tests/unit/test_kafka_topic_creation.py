"""Creating topics while the brokers have no controller (``tikk.drivers.kafka``): aiokafka
then fails with an AttributeError, which must reach callers as a retriable Kafka error (a
worker that let it through crashed whenever it reopened its consumer during a Kafka restart)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import KafkaError

from tikk.drivers.kafka import create_topics
from tikk.queue_contract import KafkaQueueUrl


class _NoControllerYet:
    """What aiokafka's admin client does when its metadata names no controller."""

    async def create_topics(self, new: Any) -> Any:
        controller: Any = None
        return controller.nodeId  # AttributeError, as in aiokafka's _send_to_controller


async def test_no_controller_yet_is_a_retriable_kafka_error() -> None:
    config = KafkaQueueUrl(("127.0.0.1:9092",))
    with pytest.raises(KafkaError) as caught:
        await create_topics(_NoControllerYet(), config, ["tikk.q"])
    assert caught.value.retriable
    assert "no Kafka controller is known yet" in str(caught.value)
