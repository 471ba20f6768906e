"""File-system steps that durability needs, shared by every layer that writes files."""

from __future__ import annotations

import os
from pathlib import Path


def sync_dir(path: Path) -> None:
    """Sync the directory ``path``: names created, renamed or deleted in it then survive power loss, as the
    files' own bytes do once they are synced."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
