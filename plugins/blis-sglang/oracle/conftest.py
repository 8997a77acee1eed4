"""Make the oracle's modules importable by name (``harness``, ``scenarios``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
