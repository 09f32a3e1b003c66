"""Where a deployment saturates, and why: the knee detectors, the verdict that combines them, and
the knee search of ``--find-knee``.

``curve`` what they share (options, findings, the curve of one context length); ``detectors`` one
function per signal, each explained in its module; ``verdict`` the knee, its one-sentence reason and
how it weighs the detectors; ``search`` the next load to measure.
"""

from __future__ import annotations

from loadgen.analysis.knee.curve import (
    Curve,
    Finding,
    KneeOptions,
    as_number,
    fmt_load,
    make_curve,
)
from loadgen.analysis.knee.detectors import (
    detect_error_onset,
    detect_kleinrock,
    detect_kneedle,
    detect_kv_saturation,
    detect_marginal_gain,
    detect_power_plateau,
    detect_preemption,
    detect_queue_onset,
    detect_server_log,
    detect_slo_breach,
    detect_usl,
    kneedle,
    run_detectors,
)
from loadgen.analysis.knee.search import SearchBudget, SearchState, saturation_reasons, search_next, search_state
from loadgen.analysis.knee.verdict import (
    CURVE_DETECTORS,
    DETECTOR_NAMES,
    DETECTOR_ORDER,
    HARD_DETECTORS,
    deciding_detectors,
    knee_verdict,
    rule_text,
)

__all__ = [
    "CURVE_DETECTORS",
    "DETECTOR_NAMES",
    "DETECTOR_ORDER",
    "HARD_DETECTORS",
    "Curve",
    "Finding",
    "KneeOptions",
    "SearchBudget",
    "SearchState",
    "as_number",
    "deciding_detectors",
    "detect_error_onset",
    "detect_kleinrock",
    "detect_kneedle",
    "detect_kv_saturation",
    "detect_marginal_gain",
    "detect_power_plateau",
    "detect_preemption",
    "detect_queue_onset",
    "detect_server_log",
    "detect_slo_breach",
    "detect_usl",
    "fmt_load",
    "knee_verdict",
    "kneedle",
    "make_curve",
    "rule_text",
    "run_detectors",
    "saturation_reasons",
    "search_next",
    "search_state",
]
