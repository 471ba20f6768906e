"""What a running job measures: a registry per container, snapshots shipped to the driver, and the
driver's Prometheus and status endpoint. ``registry`` is the contract the runtime and users write to."""
