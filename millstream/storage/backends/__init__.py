"""State backends: one folder per backend with the same roles (``backup.py``, ``restore.py``,
``admin.py``, ``factory.py``); ``base.py`` is the contract and ``registry.py`` finds them by name."""
