"""The surface list and the field list of vLLM 0.33.0 (design §4, §7.5).

``data/surface.yaml`` and ``data/fields.yaml`` are generated from vLLM 0.33.0's own
registration tables by ``tools/generate_surface.py``; ``oracle/test_surface_current.py``
checks they are current. These tests check the classification is complete and that the
engine behaves as each status says:

* every ``modelled`` field is accepted by ``resolve_settings``;
* every ``refused`` or ``out_of_scope:*`` field is refused naming it when given a value
  other than its upstream default, and accepted at its plain upstream default (vLLM
  0.33.0's ``EngineArgs`` is a plain dataclass and cannot tell an explicit default from
  an omitted field, so the default selects the behaviour the port models);
* every ``proven_inert`` field is accepted and changes neither the resolved settings nor
  the plan (:func:`test_inert_field_changes_no_decision`, the proof each names).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from blis_core.cli import main
from blis_core.contracts.engine import SurfaceReporting
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.cost.catalog import load_catalog
from vllm_fakes import H100, LLAMA2_7B, FakeEnvironment, pool_spec

from blis_vllm.config import (
    INERT_ARGS,
    MODELLED_ARGS,
    NOT_MODELLED_ARGS,
    VllmSettings,
    is_upstream_default,
    resolve_settings,
)
from blis_vllm.engine import VllmEngineFactory
from blis_vllm.planning import select_attention_backend
from blis_vllm.surface import (
    BACKLOG_LABELS,
    FIELD_STATUSES,
    LIST_NAMES,
    SERVE_ARGS,
    SURFACE_STATUSES,
    field_list,
    refusal_reason,
    surface_lists,
    surface_statuses,
)

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
FIELDS = field_list()
LISTS = surface_lists()


def _resolve(**args: Any) -> VllmSettings:
    return resolve_settings(args, LLAMA2_7B, H100, ParallelLayout())


def _fields_with(*statuses: str) -> list[str]:
    return sorted(
        n for n, e in FIELDS.items() if any(str(e["status"]).startswith(s) for s in statuses)
    )


def _other_value(name: str) -> Any:
    """A value for ``name`` that is not its upstream default."""
    entry = FIELDS[name]
    if "default" not in entry or entry["default"] is None:
        return "blis-test-value"
    default = entry["default"]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int | float):
        return default + 1
    if isinstance(default, str):
        return default + "-blis-test"
    if isinstance(default, list):
        return [*default, "blis-test-value"]
    return {**default, "blis_test": 1}


# -- completeness -------------------------------------------------------------------------


def test_lists_are_the_seven_reported_ones() -> None:
    assert tuple(sorted(LISTS)) == tuple(sorted(LIST_NAMES))
    assert set(surface_statuses()) == {*LIST_NAMES, "fields", "serve_args", "environment"}
    # vllm serve's own arguments (outside EngineArgs): none is an EngineArgs field.
    assert surface_statuses()["serve_args"] == {"api_server_count": "modelled"}
    assert surface_statuses()["environment"] == {
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "modelled"
    }
    assert not set(SERVE_ARGS) & set(FIELDS)
    assert isinstance(VllmEngineFactory(), SurfaceReporting)
    assert VllmEngineFactory().surface() == surface_statuses()


@pytest.mark.parametrize("list_name", [*LIST_NAMES, "fields"])
def test_every_item_is_classified_with_an_allowed_status(list_name: str) -> None:
    items = FIELDS if list_name == "fields" else LISTS[list_name]
    allowed = FIELD_STATUSES if list_name == "fields" else SURFACE_STATUSES
    assert items, list_name
    bad = {n: e["status"] for n, e in items.items() if e["status"] not in allowed}
    assert not bad, f"{list_name}: unclassified or unknown statuses {bad}"
    for name, e in items.items():
        status = str(e["status"])
        if status == "refused":
            assert e.get("reason") and e.get("issue"), f"{list_name}.{name}: reason and issue"
        elif status.startswith("out_of_scope:"):
            assert e.get("why"), f"{list_name}.{name}: out of scope needs why"
        elif status == "proven_inert":
            assert e.get("why") and e.get("proof"), f"{list_name}.{name}: why and proof"


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_every_inert_proof_names_an_existing_test() -> None:
    for name in _fields_with("proven_inert"):
        proof = str(FIELDS[name]["proof"])
        file, _, func = proof.partition("::")
        path = PLUGIN_ROOT / file
        assert path.is_file() and file.startswith("tests/"), f"{name}: {proof}"
        assert func.startswith("test_") and func in _test_functions(path), f"{name}: {proof}"


# -- fields against resolve_settings ------------------------------------------------------

_MODELLED_SAMPLES: dict[str, Any] = {
    "model": LLAMA2_7B.hf_id,
    "max_num_batched_tokens": 4096,
    "max_num_seqs": 64,
    "max_model_len": 2048,
    "block_size": 32,
    "gpu_memory_utilization": 0.8,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": False,
    "long_prefill_token_threshold": 128,
    "long_prefill_token_threshold_adaptive": True,
    "scheduling_policy": "priority",
    "async_scheduling": False,
    "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
    "kv_transfer_config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
    "compilation_config": {"mode": 3},
    "cudagraph_capture_sizes": [1, 2, 4, 8],
    "max_cudagraph_capture_size": 64,
    "enforce_eager": True,
    "kv_cache_dtype": "fp8",
    "watermark": 0.01,
    "num_gpu_blocks_override": 100,
    "kv_cache_memory_bytes": 1 << 30,
    "scheduler_reserve_full_isl": False,
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "moe_backend": "Marlin",  # a dense model has no MoE layer: accepted, as upstream does
    "stream_interval": 20,
}


def test_field_statuses_partition_the_argument_sets() -> None:
    assert set(_fields_with("modelled")) == MODELLED_ARGS
    assert set(_fields_with("proven_inert")) == INERT_ARGS
    assert set(_fields_with("refused", "out_of_scope:")) == set(NOT_MODELLED_ARGS)
    assert set(FIELDS) == MODELLED_ARGS | INERT_ARGS | set(NOT_MODELLED_ARGS)
    assert set(_MODELLED_SAMPLES) == MODELLED_ARGS


@pytest.mark.parametrize("name", _fields_with("modelled"))
def test_modelled_field_is_accepted(name: str) -> None:
    _resolve(**{name: _MODELLED_SAMPLES[name]})
    if "default" in FIELDS[name] and name != "model":
        _resolve(**{name: FIELDS[name]["default"]})


@pytest.mark.parametrize("name", _fields_with("refused", "out_of_scope:"))
def test_not_modelled_field_is_refused_by_name(name: str) -> None:
    value = _other_value(name)
    assert not is_upstream_default(name, value)
    with pytest.raises(InputRefused) as exc:
        _resolve(**{name: value})
    causes = {e.path: e.cause for e in exc.value.errors}
    assert f"engine.args.{name}" in causes, causes
    assert causes[f"engine.args.{name}"].startswith("not modelled by blis-vllm: ")
    assert f"engine.args.{name}" in str(exc.value)
    if "default" in FIELDS[name]:
        # The upstream default is what the port models: accepted as a no-op.
        assert _resolve(**{name: FIELDS[name]["default"]}) == _resolve()


def test_the_models_own_tokenizer_is_accepted_and_another_refused() -> None:
    """The tokenisation is priced with the catalog model's tokenizer: naming the model's
    own (vLLM's default) changes nothing; another tokenizer or token-id prompts are
    refused by name."""
    assert _resolve(tokenizer=LLAMA2_7B.hf_id) == _resolve()
    for name, value in (("tokenizer", "acme/tok"), ("skip_tokenizer_init", True)):
        with pytest.raises(InputRefused) as exc:
            _resolve(**{name: value})
        (err,) = exc.value.errors
        assert err.path == f"engine.args.{name}" and "tokenis" in err.cause


@pytest.mark.parametrize("name", _fields_with("proven_inert"))
def test_inert_field_changes_no_decision(name: str) -> None:
    """Proof for every ``proven_inert`` field: accepted, with settings and plan unchanged.

    Each field's ``why`` in ``fields.yaml`` says why vLLM 0.33.0 cannot let it change a
    scheduling, KV or step decision or a price (logging, tokenizer, API server,
    weight loading, rendezvous); this checks the port keeps it that way.
    """
    value = _other_value(name)
    assert _resolve(**{name: value}) == _resolve()
    factory = VllmEngineFactory()
    env = FakeEnvironment()
    assert factory.plan(pool_spec(**{name: value}), env) == factory.plan(pool_spec(), env)


# -- surface lists against the port -------------------------------------------------------


def test_modelled_architectures_and_quantizations_are_the_catalogs() -> None:
    catalog = load_catalog()
    models = LISTS["models"]
    archs = {m.architecture for m in catalog.models.values()}
    modelled = {a for a, e in models.items() if e["status"] == "modelled"}
    assert modelled <= archs, "a modelled architecture must be one the catalog can run"
    for arch in archs - modelled:  # in the catalog, but its KV layout is not ported yet
        assert models[arch]["status"] == "refused" and models[arch]["reason"], arch
    assert "GptOssForCausalLM" in modelled  # hybrid sliding-window KV cache groups
    quants = {m.quantization for m in catalog.models.values() if m.architecture in modelled} - {
        None
    }
    modelled_q = {q for q, e in LISTS["quantization"].items() if e["status"] == "modelled"}
    assert quants <= modelled_q


def test_modelled_attention_backends_are_the_ones_the_port_selects() -> None:
    catalog = load_catalog()
    chosen = {
        select_attention_backend(m, hw)
        for m in catalog.models.values()
        for hw in catalog.hardware.values()
    }
    backends = LISTS["attention_backends"]
    assert chosen <= set(backends), chosen - set(backends)
    assert chosen == {b for b, e in backends.items() if e["status"] == "modelled"}


def test_modelled_schedulers_are_the_ported_ones() -> None:
    modelled = {s for s, e in LISTS["schedulers"].items() if e["status"] == "modelled"}
    assert modelled == {
        "vllm.v1.core.sched.scheduler.Scheduler",
        "vllm.v1.core.sched.async_scheduler.AsyncScheduler",
    }


def test_refused_architecture_and_quantization_are_refused_by_name() -> None:
    gemma = LLAMA2_7B.model_copy(update={"architecture": "Gemma3ForCausalLM"})
    with pytest.raises(InputRefused) as exc:
        resolve_settings({}, gemma, H100, ParallelLayout())
    assert "model.architecture" in str(exc.value) and "Gemma3ForCausalLM" in str(exc.value)
    awq = LLAMA2_7B.model_copy(update={"quantization": "awq"})
    with pytest.raises(InputRefused) as exc:
        resolve_settings({}, awq, H100, ParallelLayout())
    assert "model.quantization" in str(exc.value) and "'awq'" in str(exc.value)
    unknown = LLAMA2_7B.model_copy(update={"architecture": "NoSuchForCausalLM"})
    with pytest.raises(InputRefused, match="registers no such models entry"):
        resolve_settings({}, unknown, H100, ParallelLayout())


def test_model_argument_must_be_the_pools() -> None:
    with pytest.raises(InputRefused, match="contradicts the pool model"):
        _resolve(model="Qwen/Qwen3-0.6B")


def test_top_level_cudagraph_sizes_reach_the_compilation_config() -> None:
    s = _resolve(cudagraph_capture_sizes=[1, 2, 4, 8])
    assert s.cudagraph_capture_sizes == (1, 2, 4, 8)
    assert _resolve(max_cudagraph_capture_size=64).cudagraph_capture_sizes[-1] == 64
    with pytest.raises(InputRefused, match="mutually exclusive"):
        _resolve(cudagraph_capture_sizes=[8], compilation_config={"cudagraph_capture_sizes": [8]})


def test_scheduler_reserve_full_isl_is_resolved() -> None:
    assert _resolve().scheduler_reserve_full_isl is True
    assert _resolve(scheduler_reserve_full_isl=False).scheduler_reserve_full_isl is False


# -- blis surface vllm --------------------------------------------------------------------


def test_surface_command_counts_sum_to_list_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["surface", "vllm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lists = surface_statuses()
    assert set(out["counts"]) == set(lists)
    for name, items in lists.items():
        counts = out["counts"][name]
        assert sum(counts.values()) == len(items), name
        assert set(counts) <= {"modelled", "refused", "out_of_scope", "proven_inert"}


def test_gpt_oss_plans_hybrid_kv_cache_groups() -> None:
    from blis_core.runner import DataSources
    from blis_core.runner.environment import make_environment
    from blis_core.sim.rng import RandomStreams

    from blis_vllm.planning import scheduler_kv_cache_groups

    env = make_environment(DataSources.load(), "p-0", RandomStreams(0))
    spec = pool_spec()
    spec = type(spec)(spec.pool, "openai/gpt-oss-20b", "H100-SXM", spec.layout, {})
    plan = VllmEngineFactory().plan(spec, env)
    groups = {g.name: (g.num_layers, g.sliding_window) for g in plan.kv_groups}
    assert groups == {"sliding_window": (12, 128), "full": (12, None)}
    engine_groups = scheduler_kv_cache_groups(plan.kv_groups)
    assert [(g.attention, g.num_layers) for g in engine_groups] == [
        ("sliding_window", 12),
        ("full", 12),
    ]
    # KV events name each group's spec kind (vLLM get_kv_cache_spec_kind).
    assert [g.spec_kind for g in engine_groups] == ["sliding_window", "full_attention"]
    assert plan.kv_budget is not None and plan.kv_budget.num_gpu_blocks > 0


def test_mla_model_groups_are_mla_attention_kind() -> None:
    from blis_core.runner import DataSources
    from blis_core.runner.environment import make_environment
    from blis_core.sim.rng import RandomStreams

    from blis_vllm.planning import scheduler_kv_cache_groups

    env = make_environment(DataSources.load(), "p-0", RandomStreams(0))
    base = pool_spec("deepseek-ai/DeepSeek-V3", tp=8)
    spec = type(base)(base.pool, base.model, "H200-SXM", base.layout, {})
    plan = VllmEngineFactory().plan(spec, env)
    (group,) = scheduler_kv_cache_groups(plan.kv_groups)
    assert (group.attention, group.spec_kind) == ("full", "mla_attention")


@pytest.mark.parametrize(("dp", "count", "servers"), [(1, None, 1), (2, None, 2), (1, 3, 3)])
def test_api_server_count_sets_the_frontend_processes(
    dp: int, count: int | None, servers: int
) -> None:
    """vllm serve --api-server-count, unset one per data-parallel rank (0.33.0
    entrypoints/cli/serve.py), is the plan's count of frontend processes."""
    args = {} if count is None else {"api_server_count": count}
    settings = resolve_settings(args, LLAMA2_7B, H100, ParallelLayout(dp=dp))
    assert settings.api_server_count == servers


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_api_server_count_below_one_or_not_an_integer_is_refused(bad: object) -> None:
    with pytest.raises(InputRefused) as info:
        _resolve(api_server_count=bad)
    (err,) = info.value.errors
    assert err.path.endswith("api_server_count") and "at least 1" in err.cause


def test_an_unknown_argument_names_the_serve_arguments_read() -> None:
    with pytest.raises(InputRefused) as info:
        _resolve(api_servers=2)
    (err,) = info.value.errors
    assert "unknown vLLM 0.33.0 engine argument" in err.cause and "api_server_count" in err.cause


@pytest.mark.parametrize(
    ("value", "applied"), [(None, True), ("1", True), (1, True), ("0", False), (0, False)]
)
def test_the_cuda_graph_estimate_variable_is_read_as_vllm_reads_it(
    value: object, applied: bool
) -> None:
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, bool(int(value)) in vLLM 0.33.0's
    envs.py, default 1."""
    args = {} if value is None else {"env": {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": value}}
    assert _resolve(**args).memory_profiler_estimate_cudagraphs is applied


@pytest.mark.parametrize("bad", [True, "yes", 1.0, None])
def test_a_value_vllm_could_not_read_is_refused(bad: object) -> None:
    with pytest.raises(InputRefused) as info:
        _resolve(env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": bad})
    (err,) = info.value.errors
    assert err.path == "engine.args.env.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
    assert "bool(int(value))" in err.cause


def test_an_environment_variable_not_modelled_is_refused_by_name() -> None:
    with pytest.raises(InputRefused) as info:
        _resolve(
            env={
                "VLLM_ATTENTION_BACKEND": "TRITON_ATTN",
                "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0",
            }
        )
    (err,) = info.value.errors
    assert err.path == "engine.args.env.VLLM_ATTENTION_BACKEND"
    assert err.value == "TRITON_ATTN" and "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in err.cause
    with pytest.raises(InputRefused) as info:
        _resolve(env=["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"])
    assert info.value.errors[0].path == "engine.args.env"


def test_refusals_cite_only_the_backlog_never_a_numbered_issue() -> None:
    """Design §4.1: an issue cited by a refusal stays open until the last citation goes.
    The port's refusals name its backlog label, not a numbered issue that may close
    (issue 4, the port itself, closed while 52 refusals still cited it)."""
    import re

    cited = {
        f"{name}.{item}": e["issue"]
        for name, items in [*LISTS.items(), ("fields", FIELDS)]
        for item, e in items.items()
        if "issue" in e
    }
    assert cited
    assert not {k: v for k, v in cited.items() if v not in BACKLOG_LABELS}
    numbered = re.compile(r"\bissue #?\d|#\d+\)", re.IGNORECASE)
    sources = sorted((PLUGIN_ROOT / "blis_vllm").rglob("*.py"))
    assert sources
    hits = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sources
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if numbered.search(line)
    ]
    assert not hits, hits


def test_refusal_reason_reads_the_lists() -> None:
    reason = refusal_reason("kv_connectors", "LMCacheConnectorV1")
    assert reason == f"{LISTS['kv_connectors']['LMCacheConnectorV1']['reason']} (blis-vllm#surface)"
    assert refusal_reason("fields", "data_parallel_size").endswith("(blis-vllm#surface)")
    assert refusal_reason("attention_backends", "AMX_MLA").startswith("out of scope (hardware): ")
    with pytest.raises(KeyError):
        refusal_reason("kv_connectors", "NixlConnector")  # modelled: nothing to refuse


def test_a_data_parallel_pool_is_refused_at_its_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """data_parallel_size is refused off 1 (the port runs no DP ranks); a pool whose
    layout asks dp > 1 is refused there, and the host reports the pool's layout field,
    not an engine argument."""
    with pytest.raises(InputRefused) as exc:
        _resolve(data_parallel_size=2)
    assert "engine.args.data_parallel_size" in {e.path for e in exc.value.errors}
    scenario = tmp_path / "dp.yaml"
    scenario.write_text(
        "name: dp\n"
        "deployment:\n"
        "  pools:\n"
        "  - name: pool\n"
        "    engine: {kind: vllm, version: 0.33.0}\n"
        "    model: meta-llama/Llama-3.1-8B-Instruct\n"
        "    hardware: H100-SXM\n"
        "    layout: {tp: 1, dp: 2}\n"
        "workload:\n"
        "  arrival: {process: poisson, rate_per_s: 5}\n"
        "  input_len: {family: fixed, value: 64}\n"
        "  output_len: {family: fixed, value: 8}\n"
        "  num_requests: 4\n",
        encoding="utf-8",
    )
    assert main(["run", str(scenario)]) != 0
    err = capsys.readouterr().err
    assert "deployment.pools.0.layout.dp: 2: not modelled by blis-vllm: data parallelism" in err
    assert "args.deployment" not in err and "issue #" not in err


def test_the_lists_modelled_connectors_and_methods_are_the_ones_that_run() -> None:
    """What ``blis surface vllm`` lists as modelled is what the engine accepts: the KV
    connectors kv_transfer_config takes (NixlPullConnector is vLLM 0.33.0's NixlConnector,
    ``NixlConnector = NixlPullConnector`` in ``nixl/connector.py``) and the speculative
    methods the engine runs."""
    from blis_vllm.config import _MODELLED_CONNECTORS
    from blis_vllm.engine import _MODELLED_SPEC_METHODS

    def modelled(list_name: str) -> set[str]:
        return {n for n, e in LISTS[list_name].items() if e["status"] == "modelled"}

    assert modelled("kv_connectors") == set(_MODELLED_CONNECTORS)
    assert modelled("speculative_methods") == set(_MODELLED_SPEC_METHODS)
