"""The upstream release this plugin models and the plugin's own version.

``PLUGIN_VERSION`` is the design's tag form ``v<upstream>-blis.N`` (§14.1) without the
``v``; the distribution's PEP 440 version is ``0.33.0.post1`` (``-blis.N`` maps to
``.postN``).
"""

from __future__ import annotations

__all__ = ["DISTRIBUTION_VERSION", "ENGINE_KIND", "PLUGIN_VERSION", "UPSTREAM_RELEASE"]

ENGINE_KIND = "vllm"
UPSTREAM_RELEASE = "0.33.0"
PLUGIN_VERSION = "0.33.0-blis.1"
DISTRIBUTION_VERSION = "0.33.0.post1"
