"""The one upstream release this plugin models, and the plugin's own version."""

from __future__ import annotations

__all__ = ["ENGINE", "ENGINE_KIND", "PLUGIN_VERSION", "UPSTREAM_RELEASE"]

ENGINE_KIND = "sglang"
UPSTREAM_RELEASE = "0.5.23"
ENGINE = f"{ENGINE_KIND}@{UPSTREAM_RELEASE}"
#: design §14.1: ``<upstream>-blis.N``; the distribution's PEP 440 version is ``0.5.23.post1``
PLUGIN_VERSION = f"{UPSTREAM_RELEASE}-blis.1"
