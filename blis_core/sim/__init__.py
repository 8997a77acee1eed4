"""The simulation kernel: DEVS components and messages, links, random substreams.

See :mod:`blis_core.sim.kernel` for the three-phase instant, :mod:`blis_core.sim.link`
for processor-sharing links and :mod:`blis_core.sim.rng` for substreams.
"""

from __future__ import annotations

from blis_core.sim.kernel import DEFAULT_ZERO_DELAY_BOUND, Component, Message, Simulation
from blis_core.sim.link import (
    Link,
    TransferDone,
    TransferStart,
    finish_event_us,
    processor_sharing_finish_us,
)
from blis_core.sim.rng import RandomStreams, stream_key_digest, substream

__all__ = [
    "DEFAULT_ZERO_DELAY_BOUND",
    "Component",
    "Link",
    "Message",
    "RandomStreams",
    "Simulation",
    "TransferDone",
    "TransferStart",
    "finish_event_us",
    "processor_sharing_finish_us",
    "stream_key_digest",
    "substream",
]
