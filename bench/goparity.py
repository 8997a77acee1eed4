"""The Go-parity scenario files of ``bench/scenarios``, cut to a number of requests.

Shared by the benchmark scripts that run one (``run_checkout.py``, ``step_costs.py``,
``memory_top.py``); text only, so a script can use it before it chooses which checkout's
``blis_core`` to import.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


@contextmanager
def scenario_file(
    name: str, num_requests: int | None = None, folder: Path = SCENARIOS
) -> Iterator[Path]:
    """A temporary copy of ``go-parity-<name>.yaml`` from ``folder`` with its
    ``num_requests`` replaced (unless ``None``); removed on exit."""
    text = (folder / f"go-parity-{name}.yaml").read_text(encoding="utf-8")
    if num_requests is not None:
        lines = [
            f"  num_requests: {num_requests}" if ln.startswith("  num_requests:") else ln
            for ln in text.splitlines()
        ]
        text = "\n".join(lines) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(text, encoding="utf-8")
        yield path
