"""pytest setup for the oracle: its modules import each other as top-level modules.

The oracle needs the real ``vllm==0.33.0`` package; it runs in tox's ``oracle-vllm``
environment, never in the plugin's own test environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
