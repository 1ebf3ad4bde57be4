"""Where coevo keeps what it builds once and reuses: catalogs, databases, converted models."""

from __future__ import annotations

import os
from pathlib import Path


def coevo_cache(part: str) -> Path:
    """`$COEVO_CACHE/<part>`, else `~/.cache/coevo/<part>` (not created here)."""
    base = os.environ.get("COEVO_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "coevo") / part
