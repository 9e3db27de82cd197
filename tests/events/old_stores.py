"""Stores written by released versions of shep (``tests/events/stores/``), unpacked for a test."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

STORES = Path(__file__).parent / "stores"

#: What ``shep-0.1.0.db.gz`` holds (see stores/README.md).
EVENTS_0_1_0 = 351
HEAD_0_1_0 = bytes.fromhex("37697f903ff2068d14e5fb0b86acf54e7ea1f720892acadf3592315f87b13117")


def unpack_0_1_0(home: Path) -> Path:
    """A home whose ``shep.db`` is the store shep 0.1.0 wrote; returns the database's path."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    db = home / "shep.db"
    with gzip.open(STORES / "shep-0.1.0.db.gz") as packed, db.open("wb") as out:
        shutil.copyfileobj(packed, out)
    return db
