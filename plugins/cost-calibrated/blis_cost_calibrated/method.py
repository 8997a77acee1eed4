"""Coefficients fitted to measured runs, each with the range of work it covered.

``data/calibrated-vidur.yaml``: kernel efficiencies fitted by ``blis cost fit`` to
Vidur's public operator profiles; ``data/calibrated-vllm-serving.yaml``: host and
frontend overheads and kernel efficiencies fitted to real vLLM serving runs on H100
(written by ``python bench/accuracy.py --fit --write-registry``; regenerate, do not
edit); ``data/calibrated-mxfp4.yaml``: the memory efficiency of gpt-oss's MXFP4 expert
GEMMs on H100 and H200, fitted per chip by ``python bench/fit_mxfp4.py`` to an
InferenceMAX sweep; ``data/measured-jitllm.yaml``: jitllm's own measured kernel and
link rates on the boxes it ran on (rank ``measured``, by hand from
``docs/upstream/jitllm.md`` §5). Inside its covered range an entry prices at its own
rank (``calibrated``); outside
it, as ``transferred``. Without this package every run is priced by the roofline floor alone.
"""

from __future__ import annotations

from blis_core.contracts.cost import PackagedCoefficientSet

__all__ = ["CALIBRATED", "METHOD_NAME"]

METHOD_NAME = "calibrated"

#: the fitted entries as a coefficient set named ``calibrated``
CALIBRATED = PackagedCoefficientSet(
    name=METHOD_NAME,
    description="coefficients fitted to measured runs (Vidur profiles, vLLM serving on H100, "
    "InferenceMAX gpt-oss on H100/H200)",
    package="blis_cost_calibrated",
)
