"""File-system steps that durability needs, shared by every layer that writes files."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def sync_dir(path: Path) -> None:
    """Sync the directory ``path``: names created, renamed or deleted in it then survive power loss, as the
    files' own bytes do once they are synced."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def claim_marker(marker: Path) -> bool:
    """Create ``marker`` holding this process id, atomically (a hard link of a file of this process and thread);
    False when another process, thread or earlier attempt created it already. The testing pause points use it
    so that exactly one pause happens per job."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    temporary = marker.with_name(f".{marker.name}.{os.getpid()}.{threading.get_ident()}")
    temporary.write_text(str(os.getpid()))
    try:
        os.link(temporary, marker)
        return True
    except FileExistsError:
        return False
    finally:
        temporary.unlink(missing_ok=True)
