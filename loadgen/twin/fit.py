"""Fit the engine model of docs/twin.md to :class:`~loadgen.twin.observe.Observations` (pure).

``fit(obs)`` returns a :class:`TwinFit`: one :class:`Param` per engine parameter, each with its
value, its standard uncertainty (from the Jacobian of the least-squares fit, or the inverse Hessian
of a likelihood; None where the value is read, not fitted), the evidence it came from, and
``assumed=True`` with the value used when the run cannot determine it. ``cannot_fit`` says, in
words, what the run could not tell and why.

Models (times in ms, tokens as counts; docs/twin.md has the derivations):

    decode step     T_d(n, K) = a + b * n + c * K / 1000      n running requests, K tokens in their KV
    prefill step    T_p(k)    = p0 + p1 * k / 1000            k uncached prompt tokens in the batch
    tokens / chunk  tau(n)    = tau0 + tau1 * n               (1 without speculative decoding)
    output length   log-normal(median, sigma), right-censored at max_tokens (finish "length")
    GPU power       P         = idle + (busy - idle) * [a request in flight]

All least-squares fits use scipy's ``least_squares`` with a soft-L1 loss (client-side timing has
a heavy right tail: the load generator's own scheduling, the kernel) scaled to the data.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq, least_squares, minimize
from scipy.signal import lfilter
from scipy.stats import norm

from loadgen.twin.observe import Observations

F64 = npt.NDArray[np.float64]

MIN_GAPS = 50
"""Clean decode gaps needed to fit the decode step at all."""
MIN_PREFILLS = 5
REL_UNCERTAINTY_MAX = 1.0 / 3.0
"""A coefficient known to less than three standard errors is not determined: it is dropped."""
DEFAULT_MAX_NUM_SEQS_VLLM = 256  # vLLM's max_num_seqs for its OpenAI server (1,024 on GPUs of 70 GiB or more)
DEFAULT_MAX_RUNNING_AR = 4096  # the simulator's (and a large SGLang pool's) cap without speculation
DEFAULT_MAX_RUNNING_SPEC = 48  # SGLang's default with speculative decoding
UNBOUNDED_KV_TOKENS = 10_000_000
DEFAULT_PREFIX_BLOCK = 64
DEFAULT_LEN_SIGMA = 0.8  # the simulator's natural-length spread, assumed where the run cannot tell


@dataclass
class Param:
    """One fitted (or assumed) engine parameter."""

    value: float
    uncertainty: float | None
    unit: str
    evidence: str
    assumed: bool = False

    def describe(self) -> str:
        unc = f" ± {self.uncertainty:.4g}" if self.uncertainty is not None else ""
        tag = "ASSUMED" if self.assumed else "fitted"
        return f"{self.value:.6g}{unc} {self.unit} ({tag}: {self.evidence})"


@dataclass
class TwinFit:
    params: dict[str, Param]
    cannot_fit: list[str] = field(default_factory=list)
    measured: dict[str, Any] = field(default_factory=dict)  # the range the fit saw (what-if distances)
    # the simulator's scheduler the twin runs (sim/sched_sglang.py SGLang's, sim/sched_vllm.py vLLM's) and why
    engine: str = "sglang"
    engine_evidence: str = "assumed: the run exported no server metrics that name an engine"

    def value(self, name: str) -> float:
        return self.params[name].value

    def as_json(self) -> dict[str, Any]:
        return {
            "params": {k: asdict(v) for k, v in self.params.items()},
            "cannot_fit": self.cannot_fit,
            "measured": self.measured,
            "engine": self.engine,
            "engine_evidence": self.engine_evidence,
        }


def _lsq(
    fun: Any, x0: list[float], scale: float, n_obs: int, lower: list[float] | None = None, mix: F64 | None = None
) -> tuple[F64, F64]:
    """Robust least squares; returns (x, standard errors from the Jacobian).

    ``scale`` (where the soft-L1 loss turns from squares to absolute values) starts at the data's
    spread, which for step times pooled over a ramp is mostly the spread *between* batch sizes; the
    fit is repeated at the spread of its residuals, so that the right tail of client timing (which
    pulls a least-squares fit up) stays in the loss's linear part. ``lower``: lower bounds on x
    (-inf for a free coefficient); x0 must lie within them. ``mix``: a matrix M; the fit is then of
    ``fun(M @ u)`` over u, and the result is M @ u with its errors carried through M."""
    bounds = (lower, [np.inf] * len(x0)) if lower is not None else (-np.inf, np.inf)
    m = np.eye(len(x0)) if mix is None else mix
    f = fun if mix is None else (lambda u: fun(m @ u))
    res = least_squares(f, x0, loss="soft_l1", f_scale=max(scale, 1e-9), bounds=bounds)
    resid_scale = _mad_scale(np.asarray(res.fun, dtype=np.float64))
    if 0.0 < resid_scale < scale:
        res = least_squares(f, res.x, loss="soft_l1", f_scale=resid_scale, bounds=bounds)
    jac = res.jac
    dof = max(1, n_obs - len(x0))
    s2 = 2.0 * res.cost / dof
    try:
        cov = m @ np.linalg.pinv(jac.T @ jac) @ m.T * s2
        err = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        err = np.full(len(x0), np.nan)
    return np.asarray(m @ res.x, dtype=np.float64), err


def _mad_scale(x: F64) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if len(x) else 0.0


def _bin_summary(values: F64, keys: F64) -> str:
    ks, counts = np.unique(keys, return_counts=True)
    top = ks[np.argsort(-counts)][:6]
    return ", ".join(f"n={int(k)}: {np.median(values[keys == k]):.3f} ms" for k in sorted(top))


def _fit_decode(obs: Observations, params: dict[str, Param], cannot: list[str], measured: dict[str, Any]) -> None:
    g_ms = obs.gap_s * 1e3
    n = obs.gap_batch
    ok = (n >= 1) & np.isfinite(g_ms) & (g_ms > 0)
    g_ms, n, k = g_ms[ok], n[ok], obs.gap_ctx_tokens[ok] / 1000.0
    evid_steps = ", ".join(sorted({obs.gap_run_step[i] for i in np.unique(obs.gap_step_idx[ok])})) if len(n) else ""
    if len(g_ms) < MIN_GAPS:
        cannot.append(
            f"decode step time: {len(g_ms)} clean inter-chunk gaps (need {MIN_GAPS}); the run has no streamed "
            "output to time (non-streaming requests or every request failed)"
        )
        return
    distinct_n = np.unique(np.round(n))
    measured["batch_min"] = float(n.min())
    measured["batch_max"] = float(n.max())
    measured["ctx_per_request_tokens"] = float(np.median(k * 1000.0 / n))
    scale = max(_mad_scale(g_ms), 0.02 * float(np.median(g_ms)))
    evidence = f"{len(g_ms)} clean inter-chunk gaps over {evid_steps}; medians {_bin_summary(g_ms, np.round(n))}"
    mean_ctx = float(np.mean(k / n))
    b: float
    c: float
    err_c: float | None = None
    if len(distinct_n) >= 2:
        fell: list[str] = []
        x, err = _lsq_rising(
            lambda p: p[0] + p[1] * n + p[2] * k - g_ms, float(np.median(g_ms)), 3, scale, len(g_ms), fell
        )
        a, b, c = float(x[0]), float(x[1]), float(x[2])
        ea, eb, ec = (float(e) for e in err)
        if not (c > 0 and ec < REL_UNCERTAINTY_MAX * c):
            cannot.append(
                "decode step vs tokens in the KV cache: not separable from the batch size in this run "
                f"(fitted {c:.4g} ± {ec:.2g} ms per 1k tokens); folded into the per-request term at the run's "
                f"{mean_ctx * 1000:.0f} tokens per request. Runs at two or more --context-tokens separate them"
            )
            x, err = _lsq_rising(lambda p: p[0] + p[1] * n - g_ms, float(np.median(g_ms)), 2, scale, len(g_ms), fell)
            a, b, c = float(x[0]), float(x[1]), 0.0
            ea, eb = float(err[0]), float(err[1])
            ec = 0.0
        else:
            err_c = ec
            spread = context_spread(obs)
            # served as its own term only where the requests' contexts differed by CTX_SPREAD_MIN or more:
            # at one context length the context grows with the batch, and c is what the within-step
            # spread makes of that collinearity (docs/twin.md, "Identifiability")
            measured["ctx_spread"] = spread
            measured["ctx_term_served"] = spread >= CTX_SPREAD_MIN
            if spread < CTX_SPREAD_MIN:
                cannot.append(
                    f"decode step vs tokens in the KV cache: fitted {c:.4g} ± {ec:.2g} ms per 1k tokens where the "
                    f"requests' contexts differ by {spread:.2g}x (p90/p10); folded into the per-request term at "
                    f"the run's {mean_ctx * 1000:.0f} tokens per request, so a what-if at another context length "
                    f"keeps this run's. Contexts {CTX_SPREAD_MIN:g}x apart (two --context-tokens) serve it as a term"
                )
        params["decode_ms_fixed"] = Param(a, ea, "ms", evidence)
        params["decode_ms_per_request"] = Param(b, eb, "ms", evidence)
        params["decode_ms_per_1k_ctx"] = Param(
            c,
            err_c,
            "ms",
            evidence if err_c is not None else "not separable from the batch (see cannot_fit)",
            assumed=err_c is None,
        )
        _fit_decode_knots(g_ms - c * k, n, obs.gap_step_idx[ok], a, b, scale, params, fell)
        if fell:
            measured["decode_fell_with_batch"] = True
            cannot.append(
                f"decode step vs batch: the step took less time with more requests in it ({'; '.join(fell)}; "
                f"medians {_bin_summary(g_ms, np.round(n))}). A step cannot get faster as its batch grows, so the "
                "engine's speed changed during the run (other work on its host, a clock or power change): fitted "
                "with the step held from falling, and a what-if at other loads keeps the run's drift. A quiet "
                "re-run measures it"
            )
    else:
        med = float(np.median(g_ms))
        params["decode_ms_fixed"] = Param(med, scale / math.sqrt(len(g_ms)), "ms", evidence)
        params["decode_ms_per_request"] = Param(
            0.0, None, "ms", f"one batch size only (n={int(distinct_n[0])}): growth with batch unknown", assumed=True
        )
        params["decode_ms_per_1k_ctx"] = Param(0.0, None, "ms", "one batch size only", assumed=True)
        cannot.append(
            f"decode step growth with batch: every clean gap had batch {int(distinct_n[0])}; a ramp over two or "
            "more concurrencies is needed (assumed flat)"
        )


CTX_SPREAD_MIN = 2.0
"""The requests' contexts (prompt + half the output, p90 over p10) must differ by this much for the
twin to serve the KV-context term on its own rather than fold it in at the run's context."""


def context_spread(obs: Observations) -> float:
    """p90 / p10 of the successful requests' mid-output context (prompt tokens + half the output)."""
    ctx = obs.prompt_tokens + obs.output_tokens / 2.0
    ctx = ctx[np.isfinite(ctx) & (ctx > 0)]
    if len(ctx) < 2:
        return 1.0
    lo, hi = np.percentile(ctx, [10, 90])
    return float(hi / lo)


FALL_SIGMAS = 3.0
"""A decode step that falls as the batch grows by more than this many standard errors is a change in
the host's speed during the run, and the fit says so (``decode_fell_with_batch``)."""


def _lsq_rising(resid: Any, start: float, n_coef: int, scale: float, n_obs: int, fell: list[str]) -> tuple[F64, F64]:
    """``_lsq`` of the decode line (coefficient 1: ms per running request), refitted with that slope
    held at 0 or more where it came out negative: a step does not get faster as its batch grows, so a
    falling line is the host's speed changing between the load levels, not the engine. Says so in
    ``fell`` where the fall is more than FALL_SIGMAS standard errors (a smaller one is noise, and is
    held at 0 without a word); the slope's uncertainty is then the fit's at the bound."""
    x0 = [start] + [0.0] * (n_coef - 1)
    x, err = _lsq(resid, x0, scale, n_obs)
    if x[1] >= 0:
        return x, err
    if x[1] < -FALL_SIGMAS * err[1]:
        fell.append(f"a line through them falls {-x[1]:.3g} ± {err[1]:.2g} ms per request")
    lower = [-np.inf] * n_coef
    lower[1] = 0.0
    return _lsq(resid, x0, scale, n_obs, lower=lower)


def _fit_decode_knots(
    g_ms: F64,
    n: F64,
    step_idx: npt.NDArray[np.int64],
    a: float,
    b: float,
    scale: float,
    params: dict[str, Param],
    fell: list[str],
) -> None:
    """The decode step as a broken line in the batch, through one point per measured load level (the
    median batch of each step's clean gaps), extended past the first and last along their segments: a
    step time that bends with the batch (MoE: the experts touched saturate) is not a straight line,
    and a line fitted over a ramp is off most at its ends (C=1). Kept when there are three or more
    levels, each point determined to within REL_UNCERTAINTY_MAX; the twin serves it as
    ``decode_ms_by_batch``."""
    xs = np.unique([float(np.round(np.median(n[step_idx == i]))) for i in np.unique(step_idx)])
    if len(xs) < 3:
        return
    # hat functions: the step time at n interpolates the two nearest points (the end segments extend)
    seg = np.clip(np.searchsorted(xs, n, side="right") - 1, 0, len(xs) - 2)
    frac = (n - xs[seg]) / (xs[seg + 1] - xs[seg])
    near = np.abs(n[:, None] - xs[None, :]).argmin(axis=1)
    support = np.bincount(near, minlength=len(xs))
    if support.min() < MIN_PREFILLS:
        return

    def resid(v: F64) -> F64:
        r: F64 = v[seg] * (1.0 - frac) + v[seg + 1] * frac - g_ms
        return r

    v, err = _lsq(resid, [a + b * x for x in xs], scale, len(n))
    if np.any(np.diff(v) < 0):
        # the step fell between two load levels (beyond noise: the host's speed changed, docs/twin.md):
        # refitted as the first point plus rises of 0 or more, so the points a fall joins are pooled
        falls = [
            f"n={int(xs[i])}: {v[i]:.3f} ms to n={int(xs[i + 1])}: {v[i + 1]:.3f} ms"
            for i in range(len(v) - 1)
            if v[i] - v[i + 1] > FALL_SIGMAS * math.hypot(err[i], err[i + 1])
        ]
        if falls:
            fell.append("the step falls " + ", ".join(falls))
        rises = [max(float(d), 1e-6) for d in np.diff(np.maximum.accumulate(v))]
        tri = np.tril(np.ones((len(v), len(v))))  # the points = tri @ (v_0, rise_1, rise_2, ...)
        v, err = _lsq(resid, [float(v[0]), *rises], scale, len(n), lower=[-np.inf] + [0.0] * len(rises), mix=tri)
    if not np.all((v > 0) & (err < REL_UNCERTAINTY_MAX * v)):
        return
    for x, val, e, m in zip(xs, v, err, support, strict=True):
        params[f"decode_ms_at_batch_{int(x)}"] = Param(
            float(val), float(e), "ms", f"broken line through each step's median batch: {int(m)} clean gaps nearest"
        )


def _fit_prefill(obs: Observations, params: dict[str, Param], cannot: list[str], measured: dict[str, Any]) -> None:
    t_ms = obs.prefill_s * 1e3
    k = obs.prefill_tokens / 1000.0
    ok = np.isfinite(t_ms) & (t_ms > 0)
    t_ms, k, reqs = t_ms[ok], k[ok], obs.prefill_reqs[ok]
    if len(t_ms) < MIN_PREFILLS:
        cannot.append(f"prefill step: {len(t_ms)} prefill steps timed (need {MIN_PREFILLS}); no streamed first chunks")
        return
    measured["prefill_tokens_max"] = float(k.max() * 1000.0)
    measured["prompt_tokens_max"] = float(np.nanmax(obs.prompt_tokens)) if len(obs.prompt_tokens) else 0.0
    scale = max(_mad_scale(t_ms), 0.01 * float(np.median(t_ms)))
    evidence = (
        f"{len(t_ms)} prefill steps (first chunks arriving together), {int(reqs.max())} requests and "
        f"{k.min() * 1000:.0f}-{k.max() * 1000:.0f} uncached tokens at most per step"
    )
    if k.max() - k.min() > 0.02 and len(np.unique(np.round(k * 1000))) >= 2:
        x, err = _lsq(lambda p: p[0] + p[1] * k - t_ms, [float(np.median(t_ms)), 0.0], scale, len(t_ms))
        p0, p1, e0, e1 = float(x[0]), float(x[1]), float(err[0]), float(err[1])
        if p1 > 0 and e1 < REL_UNCERTAINTY_MAX * p1:
            params["prefill_ms_fixed"] = Param(p0, e0, "ms", evidence)
            params["prefill_ms_per_1k_tokens"] = Param(p1, e1, "ms", evidence)
            _fit_prefill_floor(t_ms, k, p0, p1, scale, params, evidence)
            return
        if _fit_prefill_above_floor(t_ms, k, scale, params, evidence):
            return
        cannot.append(
            f"prefill cost per token: {p1:.3g} ± {e1:.2g} ms per 1k tokens over {k.min() * 1000:.0f}-"
            f"{k.max() * 1000:.0f} tokens a step: not determined (assumed 0); runs with longer prompts "
            "(--context-tokens) measure it"
        )
    else:
        cannot.append("prefill cost per token: every prefill step had the same token count (assumed 0)")
    med = float(np.median(t_ms))
    params["prefill_ms_fixed"] = Param(med, scale / math.sqrt(len(t_ms)), "ms", evidence)
    params["prefill_ms_per_1k_tokens"] = Param(0.0, None, "ms", "not determined by this run", assumed=True)


def _fit_prefill_floor(
    t_ms: F64, k: F64, p0: float, p1: float, scale: float, params: dict[str, Param], evidence: str
) -> None:
    """A floor under the prefill line, T = max(f, p0 + p1 k): small batches are bound by reading the
    weights, not by their tokens, so a straight line through big and small batches undershoots the
    small ones (a single request's TTFT). Kept only when the floor binds for some measured steps,
    is determined to within REL_UNCERTAINTY_MAX, and explains the data clearly better (cost -20 %)."""
    line = p0 + p1 * k
    f0 = float(np.median(t_ms[k <= np.quantile(k, 0.25)]))
    if f0 <= float(line.min()):
        return

    def hinge(x: F64) -> F64:
        r: F64 = np.maximum(x[0], x[1] + x[2] * k) - t_ms
        return r

    x, err = _lsq(hinge, [f0, p0, p1], scale, len(t_ms))
    f, q0, q1 = float(x[0]), float(x[1]), float(x[2])
    binds = int((f > q0 + q1 * k).sum())
    cost_line = float(np.sum(np.minimum(np.abs(line - t_ms), 3 * scale) ** 2))
    cost_hinge = float(np.sum(np.minimum(np.abs(hinge(x)), 3 * scale) ** 2))
    if binds < 3 or q1 <= 0 or not (err[0] < REL_UNCERTAINTY_MAX * f) or cost_hinge > 0.8 * cost_line:
        return
    params["prefill_ms_fixed"] = Param(q0, float(err[1]), "ms", evidence + "; with a floor")
    params["prefill_ms_per_1k_tokens"] = Param(q1, float(err[2]), "ms", evidence + "; with a floor")
    params["prefill_ms_floor"] = Param(
        f, float(err[0]), "ms", f"{binds} prefill steps on the floor (small batches: bound by the weights)"
    )


def _fit_prefill_above_floor(t_ms: F64, k: F64, scale: float, params: dict[str, Param], evidence: str) -> bool:
    """The prefill line from the few steps above the floor, when most steps sit on it.

    A closed-loop ramp of short prompts times mostly single-request prefills, bound by reading the
    weights (the floor); a straight line through them all is flat and its slope undetermined, yet
    the odd batched prefill (several users back at once) shows the cost per token. Fitted as the
    hinge T = max(f, q0 + q1 k), started from lines through the biggest batch (a line below the floor
    everywhere has no gradient), which must lie more than 3 spreads above the floor. Kept when at
    least two steps the floor alone misses by more than 3 spreads lie on the line, the line meets
    its steps (median residual within 3 spreads), three steps sit on the floor, and both f and q1
    are determined to within REL_UNCERTAINTY_MAX. The evidence says how many steps the line rests
    on. Without it the slope is assumed 0 and the twin prefills a batch of users as fast as one,
    which makes its TTFT under load low (h100-llama-8b at C=16: -3.6 %)."""
    f0 = float(np.median(t_ms[k <= np.quantile(k, 0.5)]))
    biggest = int(np.argmax(k))
    if t_ms[biggest] <= f0 + 3.0 * scale:
        return False

    def hinge(x: F64) -> F64:
        r: F64 = np.maximum(x[0], x[1] + x[2] * k) - t_ms
        return r

    # started from lines through the origin around the biggest batch's time over its size (single
    # prefills on an idle engine sit above the floor too, by the request's way in, at the smallest
    # token counts: no start from them); the start with the lowest cost is kept
    slope = float(t_ms[biggest] / k[biggest])
    fits = [_lsq(hinge, [f0, 0.0, slope * m], scale, len(t_ms)) for m in (0.5, 1.0, 2.0)]
    x, err = min(fits, key=lambda xe: float(np.sum(np.minimum(np.abs(hinge(xe[0])), 3 * scale) ** 2)))
    f, q0, q1 = float(x[0]), float(x[1]), float(x[2])
    on_line = q0 + q1 * k > f
    n_above, binds = int(on_line.sum()), int((~on_line).sum())
    # the line's own evidence: steps the floor alone misses by more than 3 spreads, which it meets
    clear = on_line & (t_ms - f > 3.0 * scale)
    met = bool(np.median(np.abs(hinge(x)[on_line])) <= 3.0 * scale) if n_above else False
    if (
        int(clear.sum()) < 2
        or not met
        or binds < 3
        or q1 <= 0
        or not (err[0] < REL_UNCERTAINTY_MAX * f)
        or not (err[2] < REL_UNCERTAINTY_MAX * q1)
    ):
        return False
    above_text = f"; with a floor, the line from the {n_above} steps above it"
    params["prefill_ms_fixed"] = Param(q0, float(err[1]), "ms", evidence + above_text)
    params["prefill_ms_per_1k_tokens"] = Param(q1, float(err[2]), "ms", evidence + above_text)
    params["prefill_ms_floor"] = Param(
        f, float(err[0]), "ms", f"{binds} prefill steps on the floor (small batches: bound by the weights)"
    )
    return True


def renewal_steps(p: float, depth: int, max_tokens: int) -> F64:
    """Expected decode steps to commit at least m tokens, m = 0..max_tokens, when each step commits
    1..depth+1 tokens with P(more than j) = p**j (the simulator's acceptance, ``acceptance_cdf``)."""
    surv = p ** np.arange(depth + 2, dtype=np.float64)
    surv[-1] = 0.0
    pmf = surv[:-1] - surv[1:]  # P(commit j), j = 1..depth+1
    # E[m] = 1 + sum_j P(j) E[m - j], E[<= 0] = 0: a linear recurrence, run as an IIR filter
    steps = lfilter([1.0], np.concatenate(([1.0], -pmf)), np.ones(max_tokens))
    return np.concatenate(([0.0], np.asarray(steps, dtype=np.float64)))


MIN_LABEL_REQUESTS = 20
"""Requests a workload label needs for an acceptance of its own (with two or more such labels)."""
LABEL_TAU_PREFIX = "tokens_per_chunk@"
"""Parameter name of a workload label's acceptance: ``tokens_per_chunk@chat:answer/code``."""


def _acceptance(out: F64, chunks: F64, depth: int) -> tuple[float, float, str] | None:
    """Mean tokens a decode step commits (tau), its standard uncertainty and the evidence, from the
    requests' output tokens and chunks: the decode steps each took (chunks - 1) to commit its tokens
    after the first (output - 1), matched to the expected steps of a truncated geometric acceptance of
    depth ``depth`` (``renewal_steps``) and solved for its probability with brentq. None under 5."""
    dec_tok = (out - 1.0).astype(np.int64)  # the prefill commits the first token
    dec_steps = chunks - 1.0
    if len(dec_tok) < 5:
        return None
    weight = np.bincount(dec_tok).astype(np.float64)
    target = float(dec_steps.sum())

    def excess(p: float) -> float:
        return float(weight @ renewal_steps(p, depth, len(weight) - 1)) - target

    lo, hi = 1e-9, 1.0 - 1e-9
    p_acc = lo if excess(lo) <= 0 else hi if excess(hi) >= 0 else float(brentq(excess, lo, hi, xtol=1e-7))
    tau = 1.0 + float(np.sum(p_acc ** np.arange(1, depth + 1)))
    ratio = float(dec_tok.sum() / target)
    resid = dec_tok - ratio * dec_steps
    se = math.sqrt(float(resid @ resid) / max(1, len(resid) - 1) / len(resid)) / float(dec_steps.mean())
    evidence = (
        f"{len(dec_tok)} requests: {int(dec_tok.sum())} tokens after the first in {int(target)} chunks, "
        f"matched to the steps a truncated geometric acceptance (depth {depth}) takes to commit them"
    )
    return tau, se * tau / ratio, evidence


DEPTH_TAIL_MIN = 0.01
"""Share of chunks that must hold at least depth + 1 tokens: a bigger chunk seen less often is two
events the server sent as one (its output coalesced behind a slow write), not a longer draft."""


def _depth(tok: F64) -> tuple[int, str]:
    """The draft depth: the largest chunk size that at least ``DEPTH_TAIL_MIN`` of the chunks reach,
    less one (the verify commits up to depth + 1 tokens a step). The largest chunk alone would take
    one coalesced pair of events for the depth (the seed, depth 8, sends a 10- or 11-token chunk in
    about 1 of 300), and a deeper twin spreads its requests' step counts wider."""
    sizes = np.sort(tok.astype(np.int64))[::-1]
    largest = int(sizes[0])
    need = max(1, math.ceil(DEPTH_TAIL_MIN * len(sizes)))
    top = int(sizes[need - 1])  # the need-th largest chunk: `need` chunks hold at least this many
    if top == largest:
        return largest - 1, f"largest chunk seen ({largest} tokens) - 1"
    return top - 1, (
        f"largest chunk size reached by {DEPTH_TAIL_MIN:.0%} of the chunks ({top} tokens) - 1; the "
        f"{int(np.sum(sizes > top))} larger chunks (up to {largest} tokens) are taken for events sent together"
    )


def _fit_chunks(obs: Observations, params: dict[str, Param], cannot: list[str]) -> None:
    """Speculative acceptance. Per-chunk token counts are exact only when the server reports usage
    in every chunk (otherwise the usage total is spread over the chunks by characters), and a
    request's last chunk is cut at its end, which is more likely reached by a long draw; so the
    mean accepted length is fitted to what is exact, the steps each request took: tokens after the
    first (the prefill's) over chunks after the first, matched to the expected number of steps of
    the twin's own acceptance model (truncated geometric, depth from the largest chunks: ``_depth``)."""
    tok, n = obs.chunk_tokens, obs.chunk_batch
    if len(tok) < MIN_GAPS:
        params["tokens_per_chunk"] = Param(1.0, None, "tokens", "no streamed chunks", assumed=True)
        params["spec_depth"] = Param(0.0, None, "tokens", "no streamed chunks", assumed=True)
        cannot.append("tokens per chunk (speculative acceptance): no streamed chunks; assumed 1 (no speculation)")
        return
    mean = float(tok.mean())
    depth, depth_evidence = _depth(tok)
    evidence = f"{len(tok)} chunks (first and last of each request left out)"
    params["spec_depth"] = Param(float(depth), None, "tokens", depth_evidence)
    if depth <= 0:
        params["tokens_per_chunk"] = Param(1.0, 0.0, "tokens", evidence + ": one token each")
        return
    out, chunks = obs.output_tokens, obs.output_chunks
    use = np.isfinite(out) & (chunks >= 2) & (out >= chunks)
    pooled = _acceptance(out[use], chunks[use], depth)
    if pooled is not None:
        params["tokens_per_chunk"] = Param(
            *pooled[:2], "tokens", pooled[2] + f"; the mean of whole chunks reads {mean:.3f}"
        )
        labels, counts = np.unique(obs.source[use], return_counts=True)
        big = labels[counts >= MIN_LABEL_REQUESTS]
        keyed = [str(lab) for lab in big if lab and ";" not in lab]
        if len(keyed) >= 2:
            for label in keyed:
                sel = obs.source[use] == label
                got = _acceptance(out[use][sel], chunks[use][sel], depth)
                if got is not None:
                    params[LABEL_TAU_PREFIX + label] = Param(*got[:2], "tokens", f"workload label {label!r}: " + got[2])
    else:
        params["tokens_per_chunk"] = Param(mean, float(tok.std() / math.sqrt(len(tok))), "tokens", evidence)
    if len(np.unique(n)) >= 2:
        x, err = _lsq(lambda p: p[0] + p[1] * n - tok, [mean, 0.0], max(float(tok.std()), 0.1), len(tok))
        params["tokens_per_chunk_per_request"] = Param(
            float(x[1]),
            float(err[1]),
            "tokens",
            evidence + "; the twin uses the mean (its acceptance does not vary with batch)",
        )


def _fit_lengths(obs: Observations, params: dict[str, Param], cannot: list[str]) -> None:
    out = obs.output_tokens
    ok = np.isfinite(out) & (out >= 1)
    out, stop, cap = out[ok], obs.finished_stop[ok], obs.max_tokens[ok]
    cap_max = float(np.nanmax(np.where(cap > 0, cap, np.nan))) if len(cap) and np.any(cap > 0) else 512.0
    if not len(out):
        cannot.append("output lengths: no successful request")
        return
    n_stop = int(stop.sum())
    if n_stop == 0:
        median = max(300.0, 8.0 * cap_max)
        params["natural_len_median"] = Param(
            median,
            None,
            "tokens",
            f"none of {len(out)} requests stopped before max_tokens: lengths are censored "
            f"at {cap_max:.0f}; assumed long enough that almost none stop",
            assumed=True,
        )
        params["natural_len_sigma"] = Param(DEFAULT_LEN_SIGMA, None, "", "the simulator's default", assumed=True)
        return
    lo = np.log(np.maximum(out, 1.0))
    hi = np.log(out + 1.0)
    log_cap = np.log(np.maximum(out, 1.0))

    def nll(p: F64) -> float:
        mu, s = float(p[0]), math.exp(float(p[1]))
        ll_stop = np.log(np.clip(norm.cdf((hi[stop] - mu) / s) - norm.cdf((lo[stop] - mu) / s), 1e-300, None))
        ll_len = norm.logsf((log_cap[~stop] - mu) / s)
        return -float(ll_stop.sum() + ll_len.sum())

    if n_stop < 5:
        # a few early stops still say how often requests stop below the cap: the median, with the
        # spread assumed (early stops matter to the twin: they break up closed-loop cohorts)
        fixed = math.log(DEFAULT_LEN_SIGMA)
        one = minimize(lambda q: nll(np.array([q[0], fixed])), [math.log(cap_max) + 1.0], method="BFGS")
        mu = float(one.x[0])
        e_mu = math.sqrt(max(float(np.asarray(one.hess_inv)[0, 0]), 0.0))
        ev = (
            f"{n_stop} of {len(out)} requests stopped before max_tokens (censored log-normal likelihood, "
            f"spread assumed {DEFAULT_LEN_SIGMA})"
        )
        params["natural_len_median"] = Param(math.exp(mu), math.exp(mu) * e_mu, "tokens", ev)
        params["natural_len_sigma"] = Param(
            DEFAULT_LEN_SIGMA, None, "", "too few stops to fit; the simulator's default", assumed=True
        )
        cannot.append(
            f"output length spread: only {n_stop} requests stopped before max_tokens; assumed {DEFAULT_LEN_SIGMA}"
        )
        return
    x0 = np.array([float(np.median(np.log(out))), math.log(DEFAULT_LEN_SIGMA)])
    res = minimize(nll, x0, method="BFGS")
    mu, ls = float(res.x[0]), float(res.x[1])
    cov = np.asarray(res.hess_inv)
    e_mu, e_ls = (math.sqrt(max(cov[0, 0], 0.0)), math.sqrt(max(cov[1, 1], 0.0)))
    ev = f"{n_stop} requests stopped on their own, {len(out) - n_stop} at max_tokens (censored log-normal likelihood)"
    params["natural_len_median"] = Param(math.exp(mu), math.exp(mu) * e_mu, "tokens", ev)
    params["natural_len_sigma"] = Param(math.exp(ls), math.exp(ls) * e_ls, "", ev)


def _fit_capacity(obs: Observations, params: dict[str, Param], cannot: list[str], spec: bool) -> None:
    if obs.kv_capacity_tokens:
        source = (
            "server /metrics (vllm:cache_config_info: num_gpu_blocks less vLLM's null block, x block_size)"
            if obs.engine == "vllm"
            else "server /metrics (max_total_num_tokens)"
        )
        params["kv_pool_tokens"] = Param(float(obs.kv_capacity_tokens), 0.0, "tokens", source)
    elif len(obs.kv_ratio) >= 3:
        r = obs.kv_ratio
        params["kv_pool_tokens"] = Param(
            float(np.median(r)),
            _mad_scale(r) / math.sqrt(len(r)),
            "tokens",
            f"{len(r)} /metrics samples: tokens held by running requests / KV usage fraction",
        )
    else:
        params["kv_pool_tokens"] = Param(
            float(UNBOUNDED_KV_TOKENS),
            None,
            "tokens",
            "the run exported no KV usage or capacity; assumed large enough never to fill",
            assumed=True,
        )
        cannot.append("KV pool size: no server metrics (pass --metrics-url); assumed never full")
    conc = [s.concurrency for s in obs.steps if s.concurrency]
    c_max = max(conc) if conc else 0
    batch_max = float(np.max(obs.gap_batch)) if len(obs.gap_batch) else 0.0
    if obs.logged_max_running:
        params["max_running_requests"] = Param(
            float(obs.logged_max_running), 0.0, "requests", "server log capacity line"
        )
    elif obs.running_max is not None and obs.queued_while_running_max:
        params["max_running_requests"] = Param(
            obs.running_max, 0.0, "requests", "/metrics: requests queued while running held its maximum"
        )
    elif c_max and batch_max < c_max - 1 and len(obs.gap_batch):
        plateau = float(np.quantile(obs.gap_batch, 0.999))
        params["max_running_requests"] = Param(
            round(plateau),
            1.0,
            "requests",
            f"client side: the decode batch never exceeded {plateau:.0f} at concurrency up to {c_max}",
        )
    else:
        default = DEFAULT_MAX_RUNNING_SPEC if spec else DEFAULT_MAX_RUNNING_AR
        if obs.engine == "vllm":
            default = DEFAULT_MAX_NUM_SEQS_VLLM
        seen = max(batch_max, float(obs.running_max or 0.0))
        params["max_running_requests"] = Param(
            max(float(default), seen),
            None,
            "requests",
            f"never reached: the batch grew to {seen:.0f} with the load (at least that); assumed the default cap",
            assumed=True,
        )
        cannot.append(
            f"max running requests: never reached in this run (batch up to {seen:.0f}); assumed "
            f"{max(default, int(seen))}"
        )
    if obs.preemptions:
        params["preemptions_seen"] = Param(obs.preemptions, 0.0, "requests", "/metrics retraction counter")


def _fit_prefix(obs: Observations, params: dict[str, Param], cannot: list[str]) -> None:
    _fit_prefix_cache(obs, params, cannot)
    if obs.kv_block_tokens:  # vLLM says its block size: its KV and its prefix cache come in these blocks
        params["prefix_block_tokens"] = Param(
            float(obs.kv_block_tokens), 0.0, "tokens", "server /metrics (vllm:cache_config_info block_size)"
        )


def _fit_prefix_cache(obs: Observations, params: dict[str, Param], cannot: list[str]) -> None:
    cached = obs.cached_tokens
    known = np.isfinite(cached)
    if not known.any():
        params["prefix_cache"] = Param(1.0, None, "", "the server reported no cached_tokens; assumed on", assumed=True)
        params["prefix_block_tokens"] = Param(float(DEFAULT_PREFIX_BLOCK), None, "tokens", "assumed", assumed=True)
        cannot.append("prefix cache: the server reports no cached_tokens; assumed on (SGLang's default)")
        return
    hits = cached[known]
    share = float(hits.sum() / max(1.0, np.nansum(obs.prompt_tokens[known])))
    nonzero = hits[hits > 0].astype(np.int64)
    if len(nonzero):
        block = int(np.gcd.reduce(nonzero))
        params["prefix_cache"] = Param(
            1.0, 0.0, "", f"{len(nonzero)} requests had cached prompt tokens ({share:.1%} of prompt tokens)"
        )
        params["prefix_block_tokens"] = Param(float(block), None, "tokens", "greatest common divisor of cached_tokens")
    else:
        params["prefix_cache"] = Param(
            1.0,
            None,
            "",
            "no prompt was served from cache: the workload shared no prefix, or the cache is off",
            assumed=True,
        )
        params["prefix_block_tokens"] = Param(float(DEFAULT_PREFIX_BLOCK), None, "tokens", "assumed", assumed=True)
        cannot.append("prefix cache: no cached tokens in this workload; on/off and block size assumed")


def _fit_power(obs: Observations, params: dict[str, Param], cannot: list[str]) -> None:
    p, busy = obs.power_w, obs.power_busy
    if len(p) < 5 or not (busy > 0).any():
        params["gpus"] = Param(
            float(max(obs.gpus, 1)), None, "", "no GPU samples" if not len(p) else "GPU samples", assumed=not len(p)
        )
        params["idle_w"] = Param(40.0, None, "W", "no GPU power samples", assumed=True)
        params["busy_w"] = Param(200.0, None, "W", "no GPU power samples", assumed=True)
        cannot.append("GPU power: no GPU samples under load in this run")
        return
    params["gpus"] = Param(float(obs.gpus), 0.0, "", "GPU samples")
    ev = f"{len(p)} GPU power samples, {int((busy > 0).sum())} with a request in flight"
    if (busy == 0).sum() >= 3:
        x, err = _lsq(
            lambda q: q[0] + (q[1] - q[0]) * busy - p, [float(p.min()), float(p.max())], max(_mad_scale(p), 1.0), len(p)
        )
        params["idle_w"] = Param(float(x[0]), float(err[0]), "W", ev)
        params["busy_w"] = Param(float(x[1]), float(err[1]), "W", ev)
    else:
        loaded = p[busy > 0]
        params["idle_w"] = Param(float(p.min()), None, "W", "no idle sample: lowest reading", assumed=True)
        params["busy_w"] = Param(float(np.median(loaded)), _mad_scale(loaded) / math.sqrt(len(loaded)), "W", ev)
    if obs.power_limit_w:
        params["power_limit_w"] = Param(obs.power_limit_w, 0.0, "W", "GPU samples")


def fit(obs: Observations) -> TwinFit:
    """Fit every parameter the observations determine; assume (and say so) the rest."""
    params: dict[str, Param] = {}
    cannot: list[str] = []
    measured: dict[str, Any] = {
        "records": obs.records,
        "ok_records": obs.ok_records,
        "streamed_records": obs.streamed_records,
        "concurrency": sorted({s.concurrency for s in obs.steps if s.concurrency}),
        "rates": sorted({s.rate for s in obs.steps if s.rate}),
        "context_tokens": sorted({s.context_tokens for s in obs.steps if s.context_tokens}),
        "sources": obs.sources,
    }
    if len(obs.steps) < 2:
        cannot.append(
            f"only {len(obs.steps)} step(s): growth of the step time with load is identified from two or more "
            "load levels"
        )
    if obs.streamed_records == 0:
        cannot.append("no streamed output: decode and prefill step times, tokens per chunk cannot be fitted")
    _fit_decode(obs, params, cannot, measured)
    _fit_prefill(obs, params, cannot, measured)
    _fit_chunks(obs, params, cannot)
    _fit_lengths(obs, params, cannot)
    spec = "spec_depth" in params and params["spec_depth"].value > 0
    _fit_capacity(obs, params, cannot, spec)
    _fit_prefix(obs, params, cannot)
    _fit_power(obs, params, cannot)
    result = TwinFit(params=params, cannot_fit=cannot, measured=measured)
    if obs.engine in ("sglang", "vllm"):
        result.engine = obs.engine
        result.engine_evidence = f"the server's /metrics names are {obs.engine}'s"
    return result
