"""``blis plan --engine sglang@0.5.23`` against SGLang 0.5.23's own memory rule.

For the four models and layouts of the shared fit data (Llama-2-7B TP1, Llama-2-70B TP4,
Mixtral-8x7B TP2, CodeLlama-34B TP2) on an H100-SXM, and a few argument sets, SGLang's
own code resolves the server arguments and sizes the pool from the same physical inputs
the port uses (the device's memory, what is free before and after the weights load):

* ``ServerArgs.resolve_once`` with a config-only model directory written from the BLIS
  catalog and ``get_device_memory_capacity`` answering the device's MiB
  (``memory_hook.handle_gpu_memory_settings``: ``chunked_prefill_size``, decode
  ``max_bs``, ``mem_fraction_static``);
* ``KVCacheConfigurator._profile_available_bytes``, ``config_from_budget``
  (``DefaultPoolConfigurator``, ``_apply_token_constraints``) and
  ``resolve_max_num_reqs``, bound to a stand-in configurator that holds the real
  ``ModelConfig``; ``get_available_gpu_memory`` answers the free GiB after the weights.

The port's ``resolved_args`` (what ``blis plan`` prints) must give the same resolved
arguments, ``max_total_num_tokens`` and ``max_running_requests``. The weights' and the
CUDA context's bytes are BLIS's own physics (Environment), shared by both sides: what is
checked is SGLang's rule.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import types
from collections.abc import Iterator
from typing import Any

import pytest
from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.plan import ParallelLayout
from blis_core.runner import DataSources
from blis_core.runner.environment import make_environment
from blis_core.sim.rng import RandomStreams
from harness import _SG, _import_sglang, quiet

from blis_sglang import SglangEngineFactory

MIB = 1 << 20
GIB = 1 << 30
HARDWARE = "H100-SXM"
CASES = [
    ("meta-llama/Llama-2-7b-hf", 1, {}),
    ("meta-llama/Llama-2-70b-hf", 4, {}),
    ("mistralai/Mixtral-8x7B-v0.1", 2, {}),
    ("codellama/CodeLlama-34b-Instruct-hf", 2, {}),
    ("meta-llama/Llama-2-7b-hf", 1, {"max_running_requests": 96, "page_size": 16}),
    ("meta-llama/Llama-2-7b-hf", 1, {"chunked_prefill_size": 2048, "context_length": 2048}),
    ("codellama/CodeLlama-34b-Instruct-hf", 2, {"mem_fraction_static": 0.8}),
    ("meta-llama/Llama-2-70b-hf", 4, {"max_total_tokens": 50000, "page_size": 16}),
]


def _hf_config(model: ModelArchitecture) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": [model.architecture],
        "model_type": "mixtral" if model.moe is not None else "llama",
        "hidden_size": model.hidden_size,
        "intermediate_size": model.intermediate_size or model.moe.expert_intermediate_size,  # type: ignore[union-attr]
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "torch_dtype": model.dtype,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": model.tie_word_embeddings,
    }
    if model.moe is not None:
        config["num_local_experts"] = model.moe.num_experts
        config["num_experts_per_tok"] = model.moe.experts_per_token
    return config


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


@pytest.fixture()
def model_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="blis-sglang-memory-rule-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _sglang_rule(
    model_path: str,
    tp: int,
    args: dict[str, Any],
    device_mib: float,
    pre_load_gib: float,
    free_after_load_gib: float,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    if not _SG:
        _SG.update(_import_sglang())
    from sglang.srt.arg_groups import memory_hook
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache import kv_cache_configurator as kcc
    from sglang.srt.runtime_context import get_exec, get_parallel, get_schedule
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    monkeypatch.setattr(memory_hook, "get_device_memory_capacity", lambda device=None: device_mib)
    monkeypatch.setattr(kcc, "get_available_gpu_memory", lambda *a, **k: free_after_load_gib)
    sa = _SG["ServerArgs"](
        model_path=model_path,
        device="cuda",
        load_format="dummy",
        skip_tokenizer_init=True,
        tp_size=tp,
        # on CUDA the prefill graph backend defaults to breakable
        # (cuda_graph_config.default_prefill_backend); this machine is not CUDA
        cuda_graph_backend_prefill="breakable",
        **args,
    )
    sa.resolve_once()
    get_parallel().clear_stamp()  # the previous case's stamped topology
    _SG["publish"](
        sa, role="scheduler", ranks=_SG["SpawnRanks"](world_rank=0, dp_rank=None, gpu_id=0)
    )
    get_parallel().override_permanently(
        world_group=types.SimpleNamespace(cpu_group=None), attn_tp_size=tp
    )
    mc = ModelConfig.from_server_args(sa)

    class Configurator(types.SimpleNamespace):
        """The fields KVCacheConfigurator's sizing reads; its methods bound to it."""

        def __getattr__(self, name: str) -> Any:
            attr = getattr(kcc.KVCacheConfigurator, name)
            return types.MethodType(attr, self) if callable(attr) else attr

    layers = mc.num_hidden_layers
    kvc = Configurator(
        device="cuda",
        gpu_id=0,
        mambaish_config=None,
        post_capture_kv_active=False,
        model_config=mc,
        kv_cache_dtype=mc.dtype,
        kv_cache_dtype_str="auto",
        use_mla_backend=False,
        attn_dp_size=1,
        pp_size=1,
        server_args=sa,
        is_draft_worker=False,
        spec_algorithm=SpeculativeAlgorithm.NONE,
        is_hybrid_swa=False,
        layer_info=types.SimpleNamespace(
            num_effective_layers=layers, start_layer=0, end_layer=layers
        ),
        kv_shard_spec=None,
        kv_shard_size=1,
        kv_shard_rank=None,
        page_size=get_schedule().page_size,
    )
    budget = kvc._profile_available_bytes(pre_load_gib)
    tokens = kvc.config_from_budget(budget).max_total_num_tokens
    s = get_schedule()
    return {
        "mem_fraction_static": s.mem_fraction_static,
        "chunked_prefill_size": s.chunked_prefill_size,
        "page_size": s.page_size,
        "decode_max_bs": get_exec().graph.cuda_graph_config.decode.max_bs,
        "context_len": mc.context_len,
        "max_total_num_tokens": tokens,
        "max_running_requests": kvc.resolve_max_num_reqs(tokens),
    }


@pytest.mark.parametrize(
    ("model_id", "tp", "args"), CASES, ids=[f"{m.split('/')[1]}-tp{t}-{a}" for m, t, a in CASES]
)
def test_plan_matches_sglangs_memory_rule(
    model_id: str,
    tp: int,
    args: dict[str, Any],
    data: DataSources,
    model_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = make_environment(data, "p-0", RandomStreams(0))
    model = env.model(model_id)
    # the path carries the model id: resolution reads it ("llama-2" caps prefill graphs)
    path = os.path.join(model_dir, model_id)
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(_hf_config(model), f)
    spec = EnginePoolSpec("p", model_id, HARDWARE, ParallelLayout(tp=tp), {**args})
    factory = SglangEngineFactory()
    plan = factory.plan(spec, env)
    resolved = factory.resolved_args(spec, env)
    assert plan.resident_weight_bytes is not None
    device = env.device_memory_bytes(HARDWARE)
    pre_load = device - env.non_torch_bytes(plan)
    free_after = pre_load - plan.resident_weight_bytes
    with quiet():
        real = _sglang_rule(
            path, tp, args, device / MIB, pre_load / GIB, free_after / GIB, monkeypatch
        )
    port = {
        "mem_fraction_static": resolved["mem_fraction_static"],
        "chunked_prefill_size": resolved["chunked_prefill_size"],
        "page_size": resolved["page_size"],
        "decode_max_bs": max(resolved["cuda_graph_bs_decode"]),  # type: ignore[call-overload]
        "context_len": resolved["context_length"],
        "max_total_num_tokens": resolved["max_total_num_tokens"],
        "max_running_requests": resolved["max_running_requests"],
    }
    print(f"\n{model_id} TP{tp} {args}: {port}")
    assert port == real
