"""jitllm's own measurements replayed in BLIS: simulated against measured (issue 19, item 6).

Each row is one experiment the jitllm repository reports (``docs/upstream/jitllm.md`` §6,
each with its file and commit), rebuilt as a BLIS scenario on the box it ran on: the
machine, the model file, the flags and the load. A row is *asserted* (within
:data:`TOLERANCE`), decided before it was run, when every mechanism it exercises is
modelled and its step is dominated by kernels whose rate jitllm measured on that box
(single-stream decode of a model large enough that per-token host work is small, and a
512-row prompt chunk on GemmVolta, whose rate at that width jitllm measured); the other
rows are reported, each with what it exercises that is not.
Nothing here was fitted to these rows: the ``jitllm`` coefficient set's entries come
from kernel-level figures
(``plugins/cost-calibrated/blis_cost_calibrated/data/measured-jitllm.yaml``).

Run ``python plugins/blis-jitllm/tests/seed_replay.py`` for the table (markdown); the
plugin's README holds its output. ``tests/test_seed_replay.py`` asserts the rows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.result import Result
from blis_core.contracts.scenario import Scenario
from blis_core.runner import DataSources, make_host, run_scenario

TOLERANCE = 0.15
LAPTOP = ("laptop-rtx3050ti-i9-12900hk", "RTX3050Ti-Laptop-4GB")
V100 = ("v100-sxm2-8x-e5-2680v4", "V100-SXM2-16GB")
TINY = ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b-chat-v1.0.Q3_K_M.gguf")
LLAMA8 = ("meta-llama/Llama-3.1-8B-Instruct", "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
LLAMA70 = ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.3-70B-Instruct-Q4_K_M.gguf")
BP = "block-paging.md@cd3ef386"
PL = "placement.md@05d794dd"
CUR = "current.md@05d794dd"
#: a request's own set-up in jitllm's TTFT harness (``speed -ttft``, cmd/jitllm/speed.go@cd3ef386:
#: tokenize, a fresh State on the card, prefill, sample): current.md@05d794dd names "a fixed
#: per-request cost, unattributed" only as the 3-14 % jitllm trails llama.cpp by at ~48
#: tokens (1.5-3.3 ms over its three models); no figure of it exists to price
TTFT_FIXED = "a request's set-up (tokenize, attach, sample; jitllm attributes none of it)"
#: llama.cpp's time for the same 48-token prompt on the same card (current.md@05d794dd,
#: "Time to first token": 37.4 ms at its client, its server's prompt_ms 1-2 ms less)
PASS_48 = (
    "llama.cpp takes 37.4 ms for this prompt on this card, so the 48-row pass, not a fixed "
    "cost, is most of the gap (jitllm trails llama.cpp by 3-14 % here: its unattributed "
    "per-request cost)"
)
#: GemmVolta's arithmetic was measured at 512 rows only (measured-jitllm.yaml)
NARROW = "GemmVolta's narrower token tiles have no measured rate"
#: ``jitllm batch`` runs its rows in one step each token (not the server's measured choice)
BATCH = {"max-seq": 1024, "joint-steps": "always"}


@dataclass(frozen=True)
class Row:
    """One measured experiment: where it ran, the load, the figure and its source."""

    name: str
    box: tuple[str, str]
    model: tuple[str, str]
    args: dict[str, Any]
    prompt: int
    output: int
    metric: str
    """decode_tok_s (one row), batch_tok_s (``sessions`` rows together: their generated
    tokens over the whole run, prompt included, as ``jitllm batch`` counts them), ttft_ms
    or prefill_tok_s (the prompt over the time to the first token)"""
    measured: float
    source: str
    asserted: bool = False
    why_not: str = ""
    sessions: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


ROWS: tuple[Row, ...] = (
    # §6.1 tinyllama q3_K_M on the laptop, jitllm run -n 8, greedy
    Row("tinyllama, every block on the host", LAPTOP, TINY, {"devices": "cpu"}, 16, 8,
        "decode_tok_s", 85.58, f"{BP} 'What it costs'",
        why_not="no current Q3_K host kernel rate: the floor's 80 % of DRAM prices it"),
    Row("tinyllama, every block on the card (-vram 3G)", LAPTOP, TINY, {"devices": "cuda:0=3G"},
        16, 8, "decode_tok_s", 172.95, f"{BP} 'What it costs'",
        why_not="a 0.5 GB model: its step is mostly per-token host work, which nothing "
        "measured prices"),
    Row("tinyllama, -vram 200M: 5 of 22 blocks on the card", LAPTOP, TINY,
        {"devices": "cuda:0=200M"}, 16, 8, "decode_tok_s", 40.83, f"{BP} 'What it costs'",
        why_not="the 200 MiB budget's block count depends on jitllm's measured scratch"),
    *(
        Row(f"tinyllama, seam at {gl} blocks", LAPTOP, TINY, {"gpu-layers": gl}, 16, 48,
            "decode_tok_s", tok_s, f"{PL} 15g (after)",
            why_not="Q3_K host kernels and per-token host work, as the two rows above")
        for gl, tok_s in ((0, 76.2), (6, 81.4), (11, 97.4), (16, 107.8))
    ),
    # §6.2 Llama-3.3-70B on the laptop, card pinned to 2 GiB, host capped at 24 GiB
    Row("70B, 2 GiB card, 24 GiB host: paged from NVMe", LAPTOP, LLAMA70,
        {"devices": "cuda:0=2G", "maxmem": "24G", "max-seq": 1024}, 16, 4, "decode_tok_s",
        1 / 18.09, f"{BP} 'THE 70B ROW' (host arm)",
        why_not="the pager's reads are priced at the measured disk rate; the 18 s a token "
        "jitllm measured is more than reading and computing the 16 GiB it pages costs here"),
    # §6.3 Llama-3.1-8B Q4_K_M on one V100
    Row("8B on one V100, tg128", V100, LLAMA8, {}, 16, 128, "decode_tok_s", 136.6,
        f"{CUR} (pp512/tg128)", asserted=True),
    # asserted (2026-12-04, before it was run with the rate): one 512-row chunk whose
    # projections run GemmVolta at the rate jitllm measured on this box at this width on
    # the 8B's 14336-row matrices (gate and up, 54 % of the chunk's projection FLOPs;
    # down, q/k/v and o take it as transferred, the same kernel and tile); attention, the
    # activations' f16 conversions and the prompt's host work (a few ms) are the floor's
    Row("8B on one V100, pp512", V100, LLAMA8, {}, 512, 2, "prefill_tok_s", 4102,
        f"{CUR} (pp512/tg128)", asserted=True),
    Row("8B serving, 514-token prompt: decode", V100, LLAMA8, {"max-seq": 4096}, 514, 256,
        "decode_tok_s", 128.7, f"{CUR} (serving)", asserted=True),
    Row("8B serving, 514-token prompt: TTFT", V100, LLAMA8, {"max-seq": 4096}, 514, 256,
        "ttft_ms", 172, f"{CUR} (serving)",
        why_not=f"{TTFT_FIXED} and jitllmd's HTTP path; a 2-row second chunk: {NARROW}"),
    Row("8B TTFT, 48-token prompt (warm)", V100, LLAMA8, {"max-seq": 4096}, 48, 2,
        "ttft_ms", 40.3, f"{CUR} (TTFT warm)",
        why_not=f"its chunk: {NARROW}; {PASS_48}"),
    Row("8B TTFT, 531-token prompt (warm)", V100, LLAMA8, {"max-seq": 4096}, 531, 2,
        "ttft_ms", 166.6, f"{CUR} (TTFT warm)",
        why_not=f"{TTFT_FIXED}; a 19-row second chunk: {NARROW}"),
    Row("8B TTFT, 2049-token prompt (warm)", V100, LLAMA8, {"max-seq": 4096}, 2049, 2,
        "ttft_ms", 556.8, f"{CUR} (TTFT warm)",
        why_not=f"{TTFT_FIXED}; attention to 2048 keys (FlashPrefill70, measured only on "
        "1B-2B models' heads) is the floor's"),
    *(
        Row(f"8B batched decode, {n} rows", V100, LLAMA8, BATCH, 6, 128, "batch_tok_s", tok_s,
            f"{CUR} (jitllm batch)", sessions=n,
            why_not="the twin's weight reads at the ~530 GB/s jitllm measured at 2-4 rows "
            "(padded to 8), its arithmetic at GemmVolta's 512-row rate, transferred: "
            f"{NARROW} (16 rows take MatVecMMA70, also unmeasured); its padding, f16 "
            "conversions and Reduce launches are not modelled")
        for n, tok_s in ((16, 955), (32, 1288), (64, 1860), (128, 2440))
    ),
    # §6.4 Llama-3.3-70B on four V100s
    Row("70B on four V100s, tg128", V100, LLAMA70, {"devices": "cuda:0,cuda:1,cuda:2,cuda:3"},
        16, 128, "decode_tok_s", 18.3, f"{CUR} (70B, 4 cards)", asserted=True),
    Row("70B on four V100s, serving TTFT", V100, LLAMA70,
        {"devices": "cuda:0,cuda:1,cuda:2,cuda:3", "max-seq": 4096}, 514, 16, "ttft_ms", 1351,
        f"{CUR} (70B, 4 cards)",
        why_not=f"{TTFT_FIXED} and jitllmd's HTTP path; the 70B's 28672-row matrices "
        "take GemmVolta's rate measured on the 8B's, transferred; four cards in turn"),
    # §6.5 the V100 box's Xeon alone (12 cores of one socket)
    Row("8B on the Xeon alone, tg128", V100, LLAMA8, {"devices": "cpu"}, 16, 128,
        "decode_tok_s", 11.22, f"{CUR} (Xeon scoreboard)",
        why_not="no kernel rate for the Xeon's host: the floor's 80 % of one socket's DRAM"),
    Row("8B on the Xeon alone, pp512", V100, LLAMA8, {"devices": "cpu"}, 512, 2,
        "prefill_tok_s", 50.5, f"{CUR} (Xeon scoreboard)",
        why_not="host matrix-matrix rate: no measured figure"),
)  # fmt: skip


def scenario(row: Row) -> Scenario:
    """The row as a BLIS scenario: one closed loop of ``sessions`` rows at a time."""
    machine, hardware = row.box
    model, load = row.model
    return Scenario.model_validate(
        {
            "name": "seed-replay",
            "seed": 1,
            "deployment": {
                "pools": [
                    {
                        "name": "box",
                        "engine": {"kind": "jitllm", "version": "2026.12.3"},
                        "model": model,
                        "hardware": hardware,
                        "machine": machine,
                        "args": {"load": load, "max-queue": -1, "max-seq": 2048, **row.args},
                    }
                ]
            },
            "workload": {
                "arrival": {"process": "concurrency", "max_concurrency": row.sessions},
                "input_len": {"family": "fixed", "value": row.prompt},
                "output_len": {"family": "fixed", "value": row.output},
                "num_requests": row.sessions * (1 if row.sessions > 1 else 2),
            },
        }
    )


def simulated(row: Row, result: Result) -> float:
    """The row's figure from a Result."""
    est = result.estimates
    if row.metric == "ttft_ms":
        return est["ttft"]["mean"].mean
    if row.metric == "prefill_tok_s":
        return row.prompt / (est["ttft"]["mean"].mean / 1000)
    if row.metric == "batch_tok_s":
        # cmd/jitllm/batch.go@4f580d6d: generated tokens over the whole wall, the prompt's
        # steps included; the rows start together, so a row's end-to-end time is the wall
        return row.sessions * row.output / (est["e2e"]["mean"].mean / 1000)
    return 1000 / est["itl"]["mean"].mean


def replay(rows: tuple[Row, ...] = ROWS) -> list[tuple[Row, float]]:
    """Every row simulated: (row, simulated figure)."""
    host = make_host()
    data = DataSources.load(host=host)
    return [(row, simulated(row, run_scenario(scenario(row), host, data))) for row in rows]


def table(results: list[tuple[Row, float]]) -> str:
    """The markdown table of the plugin's README."""
    lines = [
        "| experiment | box | metric | measured | simulated | error | asserted |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, sim in results:
        err = sim / row.measured - 1
        check = f"yes (±{TOLERANCE:.0%})" if row.asserted else f"no: {row.why_not}"
        lines.append(
            f"| {row.name} | {row.box[1]} | {row.metric} | {row.measured:g} | {sim:.4g} | "
            f"{err:+.1%} | {check} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(table(replay()) + "\n")
