"""Speculative decoding's acceptance: how many tokens one verify cycle commits, per prompt class.

A request belongs to an acceptance class (:func:`request_source`): its workload label where the
profile keys acceptance by label, else what its prompt's text classifies as (code, prose, default).
Each class has a mean committed length ``tau`` (accepted + 1); :func:`acceptance_cdf` turns it into
the truncated geometric distribution the engine draws each cycle's committed tokens from.
"""

from __future__ import annotations

import numpy as np

from loadgen.sim.profile import SpecConfig
from loadgen.sim.text import classify_source

SOURCE_PREFIX = "src:"
"""A request's ``source`` is this and its workload label when the profile's ``tau_by_source`` names
the label (the X-Loadgen-Source header), else the classifier's ``code``/``prose``/``default``."""


def request_source(taus_by_source: dict[str, float], label: str | None, text: str) -> str:
    """The acceptance class of a request: its workload label where the profile keys acceptance by
    it (``SpecConfig.taus_by_source()``), else what the prompt's text classifies as."""
    if label and label in taus_by_source:
        return SOURCE_PREFIX + label
    return classify_source(text)


def acceptance_cdf(tau: float, depth: int) -> np.ndarray:
    """CDF over committed tokens 1..depth+1 with P(committed > j) = p**j and mean ``tau``."""
    if depth <= 0 or tau <= 1.0:
        return np.array([1.0])
    tau = min(tau, depth + 1.0 - 1e-6)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        mean = 1.0 + sum(p**j for j in range(1, depth + 1))
        if mean < tau:
            lo = p
        else:
            hi = p
    p = (lo + hi) / 2
    surv = np.array([p**j for j in range(depth + 1)])  # P(committed > j), j = 0..depth
    pmf = surv - np.append(surv[1:], 0.0)
    cdf = np.cumsum(pmf)
    cdf[-1] = 1.0
    return cdf


def class_cdfs(spec: SpecConfig) -> dict[str, np.ndarray]:
    """:func:`acceptance_cdf` of every acceptance class ``spec`` knows, keyed as ``request_source``
    names them (``default`` also serves a class without a ``tau`` of its own)."""
    cdfs = {
        "default": acceptance_cdf(spec.tau, spec.depth),
        "code": acceptance_cdf(spec.tau_code or spec.tau, spec.depth),
        "prose": acceptance_cdf(spec.tau_prose or spec.tau, spec.depth),
    }
    for label, tau in spec.taus_by_source().items():
        cdfs[SOURCE_PREFIX + label] = acceptance_cdf(tau, spec.depth)
    return cdfs
