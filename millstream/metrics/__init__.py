"""What a running job reports: a container's snapshot thread and reporters, snapshots as messages to a stream,
the Prometheus exposition and the driver's HTTP server and status page. The registry users and the runtime write
to is a contract: :mod:`millstream.contracts.metrics`."""
