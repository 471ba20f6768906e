"""Bytewax (0.21): W1 and W2 over the input topic, with recovery on (its SQLite snapshots every 10 s,
its default durable state); the Kafka source stops at the end of each partition (``tail=False``).

``--follow`` (the latency benchmark): the source's defaults, so it waits for new records (``tail=True``, batches
of up to 1,000), the sink's producer its defaults (librdkafka's), epochs every 10 s as above; it runs until it is
killed (SIGTERM)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from pathlib import Path

import bytewax.operators as op
from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource, KafkaSourceMessage
from bytewax.dataflow import Dataflow
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.run import cli_main
from common import parse_args, w2_value


def count(follow: bool, state: int | None, message: KafkaSourceMessage) -> tuple[int, bytes]:
    new = (state or 0) + 1
    return new, w2_value(new, message.value, follow)


def main() -> None:
    args = parse_args()
    flow = Dataflow(args.name)
    messages = op.input("in", flow, KafkaSource([args.bootstrap], [args.input], tail=args.follow, batch_size=1000))
    if args.workload == "w1":
        out = op.map("copy", messages, lambda m: KafkaSinkMessage(m.key, m.value))
    else:
        keyed = op.key_on("key", messages, lambda m: m.key.decode())
        counts = op.stateful_map("count", keyed, partial(count, args.follow))
        out = op.map("emit", counts, lambda kv: KafkaSinkMessage(kv[0].encode(), kv[1]))
    op.output("out", out, KafkaSink([args.bootstrap], args.output))
    recovery = Path(args.workdir) / "recovery"
    recovery.mkdir(parents=True)
    init_db_dir(recovery, 1)
    cli_main(
        flow,
        workers_per_process=args.containers,
        epoch_interval=timedelta(seconds=10),
        recovery_config=RecoveryConfig(str(recovery), backup_interval=timedelta(0)),
    )


if __name__ == "__main__":
    main()
