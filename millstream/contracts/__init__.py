"""The seams every layer above codes against, and nothing else: the system contract (``systems``) and the
startpoint types it resolves (``startpoints``), the metadata store (``metadata``, ``metadata_factory``) and the
coordination records kept in it (``coordination``), the blob store (``blobstore``), the metrics registry
(``metrics``) and its snapshots (``metrics_snapshot``), and the settings of those namespaces (``*_settings``).

Implementations live above: the embedded defaults in :mod:`millstream.embedded`, the connectors in
:mod:`millstream.connectors`, both reached by a factory name in config, never by an import from the engine.
"""
