"""The ``kafka`` system: Apache Kafka topics through confluent-kafka (librdkafka); ``pip install millstream[kafka]``.

``systems.<s>.samza.factory=kafka`` and ``systems.<s>.bootstrap.servers=host:port`` are all a job
needs; a stream is a topic, a partition a partition, an offset Kafka's offset as a decimal string.
"""

from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.consumer import KafkaSystemConsumer
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.connectors.kafka.producer import KafkaSystemProducer

__all__ = ["KafkaSystemAdmin", "KafkaSystemConsumer", "KafkaSystemFactory", "KafkaSystemProducer"]
