"""The jitllm snapshot this plugin models, and the plugin's own version.

jitllm has no tagged release: its binary reports the version set at link time (``dev``
by default). BLIS names the snapshot it read by the date it read it, 2026-12-03; the
files and commits each rule comes from are in ``docs/upstream/jitllm.md`` and in each
module's docstring.
"""

from __future__ import annotations

__all__ = ["ENGINE", "ENGINE_KIND", "PLUGIN_VERSION", "UPSTREAM_RELEASE"]

ENGINE_KIND = "jitllm"
UPSTREAM_RELEASE = "2026.12.3"
ENGINE = f"{ENGINE_KIND}@{UPSTREAM_RELEASE}"
#: design §14.1: ``<upstream>-blis.N``; the distribution's PEP 440 version is ``2026.12.3.post1``
PLUGIN_VERSION = f"{UPSTREAM_RELEASE}-blis.1"
