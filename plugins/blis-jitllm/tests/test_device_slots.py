"""jitllm's device block slots (paging blocks through a card, ``jit/gpu/tier/page.go``)
and ``jitllmd serve``: no flag of serve turns them on.

A block pages through a device's slots only where it is marked streamed
(``GPU.Stream``, ``jit/gpu/tier/multi.go@193d981f``): ``devTier.prepLayer`` declines a
block that does not fit unless ``mayPage && g.stream[li]`` (``jit/gpu/tier/layer.go``,
index id 70896709668), so an unmarked block runs on the host. The marks come from
``jitllm run -placement N=DEV~`` or ``model.Place.Stream`` (the CLI reference, index id
70948128004; ``docs/design/block-paging.md@cd3ef386``: "There is no device-wide paging
switch any more"). ``jitllmd serve``'s flags (``server/cmd/jitllmd/main.go@0358625``) and
``server.LoadOptions`` (``server/engine.go@00860835``) carry no placement map, and the
placement service moves the seam only. ``docs/upstream/jitllm.md`` §2.1 has the design.
"""

from __future__ import annotations

import pytest
from blis_core.contracts.errors import InputRefused

from blis_jitllm import JitllmEngineFactory
from blis_jitllm.settings import FLAGS, RUN_ONLY_FLAGS, resolve_settings


def test_placement_is_no_serve_flag_and_its_refusal_says_why() -> None:
    assert "placement" not in FLAGS
    assert "placement" not in JitllmEngineFactory().surface()["flags"]
    with pytest.raises(InputRefused, match="not a flag of jitllmd serve") as refused:
        resolve_settings({"placement": "0-79=cuda:0~"}, 4096)
    assert "block slots" in str(refused.value)
    assert "jitllm run" in str(refused.value)


def test_every_run_only_flag_is_refused_with_its_reason() -> None:
    for name, why in RUN_ONLY_FLAGS.items():
        assert name not in FLAGS
        with pytest.raises(InputRefused) as refused:
            resolve_settings({name: "1"}, 4096)
        assert why in str(refused.value)


def test_a_flag_of_neither_keeps_the_plain_refusal() -> None:
    with pytest.raises(InputRefused, match="not a flag of jitllmd serve") as refused:
        resolve_settings({"no-such-flag": "1"}, 4096)
    assert "jitllm run" not in str(refused.value)
