"""An equivalent toy KV connector on both sides of the oracle (synchronous loads).

Both connectors report, for a request looked up in the prefix cache, an external
hit of the first ``HIT_FRACTION`` of its prompt in whole blocks (capped at
``num_tokens - 1``), beyond the local hit the scheduler passes, loaded
synchronously; ``request_finished`` frees at once. The upstream one is a
``KVConnectorBase_V1`` subclass that vLLM 0.33.0 loads through
``KVTransferConfig(kv_connector="BlisToySyncConnector",
kv_connector_module_path="toy_connector")``
(``vllm/distributed/kv_transfer/kv_connector/factory.py``); the port's is a
:class:`blis_vllm.kv_connector.KVConnectorBase`. Both log every scheduler-side
call so the oracle compares the call sequences as well as the decisions.
"""

from __future__ import annotations

from typing import Any

from blis_vllm.kv_connector import KVConnectorBase

__all__ = ["PortToySyncConnector", "toy_external_hit"]  # and BlisToySyncConnector, lazily

HIT_FRACTION = (3, 4)


def toy_external_hit(
    num_prompt_tokens: int, num_tokens: int, num_computed_tokens: int, block_size: int
) -> int:
    """External tokens beyond ``num_computed_tokens`` the toy store holds."""
    hit = num_prompt_tokens * HIT_FRACTION[0] // HIT_FRACTION[1] // block_size * block_size
    return max(min(hit, num_tokens - 1) - num_computed_tokens, 0)


class PortToySyncConnector(KVConnectorBase):
    """The port's side."""

    def __init__(self, block_size: int) -> None:
        super().__init__(kv_role="kv_both")
        self.block_size = block_size
        self.log: list[tuple[Any, ...]] = []

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int, bool]:
        n = toy_external_hit(
            request.num_prompt_tokens, request.num_tokens, num_computed_tokens, self.block_size
        )
        self.log.append(("match", request.request_id, num_computed_tokens, n))
        return n, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self.log.append(("alloc", request.request_id, len(blocks), num_external_tokens))

    def build_connector_meta(self, scheduler_output: Any) -> object:
        return None

    def request_finished(
        self, request: Any, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        self.log.append(("finished", request.request_id, len(block_ids)))
        return False, None


def _upstream_class() -> type:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
    )

    class _Meta(KVConnectorMetadata):
        pass

    class Upstream(KVConnectorBase_V1):  # type: ignore[misc]
        log: list[tuple[Any, ...]] = []

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
            super().__init__(vllm_config, role, kv_cache_config)
            self.block_size = vllm_config.cache_config.block_size
            type(self).log = self.log = []

        # scheduler side
        def get_num_new_matched_tokens(
            self, request: Any, num_computed_tokens: int
        ) -> tuple[int, bool]:
            n = toy_external_hit(
                request.num_prompt_tokens, request.num_tokens, num_computed_tokens, self.block_size
            )
            self.log.append(("match", request.request_id, num_computed_tokens, n))
            return n, False

        def update_state_after_alloc(
            self, request: Any, blocks: Any, num_external_tokens: int
        ) -> None:
            self.log.append(
                ("alloc", request.request_id, len(blocks.get_block_ids()[0]), num_external_tokens)
            )

        def build_connector_meta(self, scheduler_output: Any) -> Any:
            return _Meta()

        def request_finished(
            self, request: Any, block_ids: list[int]
        ) -> tuple[bool, dict[str, Any] | None]:
            self.log.append(("finished", request.request_id, len(block_ids)))
            return False, None

        # worker side (never called: the oracle runs no workers)
        def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
            raise NotImplementedError

        def wait_for_layer_load(self, layer_name: str) -> None:
            raise NotImplementedError

        def save_kv_layer(
            self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any
        ) -> None:
            raise NotImplementedError

        def wait_for_save(self) -> None:
            raise NotImplementedError

    Upstream.__name__ = Upstream.__qualname__ = "BlisToySyncConnector"
    return Upstream


def __getattr__(name: str) -> Any:
    # vLLM imports ``toy_connector`` and takes ``BlisToySyncConnector`` lazily, so the
    # port's tests can import this module without vLLM.
    if name == "BlisToySyncConnector":
        cls = _upstream_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
