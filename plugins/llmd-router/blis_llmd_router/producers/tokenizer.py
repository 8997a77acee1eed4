"""``token-producer``: the tokenised prompt every prefix-aware plugin reads.

Port of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer/tokenizer.go``
(``PluginFactory``, ``NewPlugin``) and ``estimate.go`` (llm-d-router v0.10.0).

Backends, chosen as upstream chooses them:

* ``estimate`` (no ``modelName``, no ``vllm``, no ``udsTokenizerConfig``; the zero-config
  default): upstream packs 4 bytes of prompt text into each uint32 pseudo-token
  (``bytesPerToken``), so the pseudo-tokens never equal the engine's token ids. A BLIS
  prompt has no text, only content keys and token counts; its pseudo-tokens are
  :func:`~blis_core.contracts.request.prompt_token_ids` over the 2^32 vocabulary
  (:data:`~blis_llmd_router.framework.TOKENIZER_VOCAB_SIZE`): one pseudo-token per prompt
  token (a token averages about 4 bytes of text, the rule upstream's estimate rests on),
  equal content giving equal pseudo-tokens, and, as upstream, never the engine's ids.
* ``vllm`` / ``udsTokenizerConfig`` with ``modelName``: upstream asks the model server's
  tokenizer, so the ids are the engine's own. BLIS materialises the engine's ids the way the
  engine does, ``prompt_token_ids(prompt, vocab_size)`` with the vocabulary of ``modelName``
  from the run's model catalog, which the simulator's runtime provides
  (:class:`~blis_core.contracts.router.ModelFacts`). A ``modelName`` the catalog lacks,
  or a runtime without model facts, is refused: BLIS has no tokenizer for it.

Refused as upstream refuses: more than one backend; ``vllm``/``udsTokenizerConfig`` without
``modelName``; an ``estimate.image.mode`` other than ``dynamic``/``static`` (multimodal
settings are otherwise inert: BLIS prompts are text-only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import ModelFacts
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import TOKENIZER_VOCAB_SIZE, Plugin
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["TOKEN_PRODUCER_TYPE", "TokenProducer", "catalog_vocab_size"]

TOKEN_PRODUCER_TYPE = "token-producer"


def catalog_vocab_size(model_name: str, runtime: object) -> int | None:
    """The vocabulary of ``model_name`` in the run's catalog (via the runtime), or ``None``."""
    if not isinstance(runtime, ModelFacts):
        return None
    model = runtime.model(model_name)
    return None if model is None else int(model.vocab_size)


class TokenProducer(Plugin):
    """Chooses the vocabulary the router tokenises prompts with."""

    plugin_type = TOKEN_PRODUCER_TYPE
    PARAMS = {
        "modelName": ParamSpec("str", ""),
        "vllm": ParamSpec("object", None),
        "estimate": ParamSpec("object", None),
        "udsTokenizerConfig": ParamSpec("object", None),
    }

    def __init__(
        self, name: str, backend: str = "estimate", model_name: str = "", vocab_size: int = 0
    ) -> None:
        super().__init__(name)
        self.backend = backend
        self.model_name = model_name
        self.vocab_size = (
            vocab_size if backend != "estimate" and vocab_size else TOKENIZER_VOCAB_SIZE
        )

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> TokenProducer:
        """Factory; refuses what upstream's ``PluginFactory`` refuses, and unknown models."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        model = str(p["modelName"])
        estimate = p["estimate"] is not None
        uds = bool(p["udsTokenizerConfig"])
        vllm = p["vllm"] is not None or model != ""
        if (estimate and (uds or vllm)) or (uds and vllm):
            raise InputRefused.one(
                path,
                dict(params or {}),
                f"invalid configuration for '{cls.plugin_type}' plugin {name!r}: only one of"
                " 'estimate', 'vllm', or 'udsTokenizerConfig' may be set",
            )
        if (uds or vllm) and not model:
            raise InputRefused.one(
                f"{path}.modelName",
                model,
                f"invalid configuration for '{cls.plugin_type}' plugin {name!r}: 'modelName'"
                " must be specified",
            )
        image = (p["estimate"] or {}).get("image") if estimate else None
        if isinstance(image, Mapping) and image.get("mode") not in (None, "", "dynamic", "static"):
            raise InputRefused.one(
                f"{path}.estimate.image.mode",
                image.get("mode"),
                f"invalid configuration for '{cls.plugin_type}' plugin {name!r}:"
                ' estimate.image.mode must be "dynamic" or "static"',
            )
        if uds or vllm:
            vocab = catalog_vocab_size(model, ctx.runtime)
            if vocab is None:
                raise InputRefused.one(
                    f"{path}.modelName",
                    model,
                    f"plugin {name!r}: model {model!r} is not modelled by blis-llmd-router"
                    " (not in the run's model catalog, so there is no tokenizer for it)",
                )
            return cls(name, "uds" if uds else "vllm", model, vocab)
        return cls(name, "estimate", "")
