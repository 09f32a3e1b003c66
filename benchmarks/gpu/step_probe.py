"""What one decode or prefill step of a dense GQA model costs on the GPU this runs on, bare.

The simulator's step model (loadgen/sim/model.py) prices a step as ``t_fix + max(t_mem, t_cmp)``
with ``t_mem = weights / (eta_bw * BW) + kv / (eta_attn * BW)`` and ``t_cmp = flops / (eta_c *
peak)``. ``t_fix`` is the engine's (scheduler, sampling, launches outside the graph); the three
efficiencies are the GPU's and its kernels'. This probe measures the GPU's part on real hardware:
a forward of Llama-3.1-8B's shape (32 layers, hidden 4096, 32 query and 8 KV heads of 128, MLP
14336, vocabulary 128256; random BF16 weights, nothing downloaded) written in plain PyTorch --
cuBLAS matmuls, PyTorch's fused attention, an RMSNorm -- each decode shape captured in a CUDA graph
and replayed (no launch overhead, as SGLang's graphs), prefill run eagerly on one sequence.

It prints and writes (``--out``) per shape: the step's median time over the replays, the bytes it
must read (weights once, the KV cache of every request), its FLOPs, and the achieved shares of the
spec sheet's bandwidth and BF16 peak that ``--bw-tb-s``/``--bf16-tflops`` give (H200: 4.8 and 989).
Also the copy bandwidth and the dense BF16 and FP8 matrix rates at 8192^3, and with ``--fp8-70b`` an
FP8 Llama-3.3-70B-shaped decode (80 layers, hidden 8192, MLP 28672), whose weights stream as one
byte each.

    python benchmarks/gpu/step_probe.py [--out step_probe.json] [--fp8-70b]

Needs torch with CUDA; about a minute on an H200. benchmarks/gpu/compare_step_probe.py sets the
figures beside the step model's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

LLAMA_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "inter": 14336, "vocab": 128256}
QWEN3_32B = {"layers": 64, "hidden": 5120, "heads": 64, "kv_heads": 8, "head_dim": 128, "inter": 25600, "vocab": 151936}
LLAMA_70B = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128, "inter": 28672, "vocab": 128256}


def timed(fn, repeats: int, warmup: int = 3) -> list[float]:
    """Milliseconds of each of ``repeats`` calls, by CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


class Model:
    """Weights of a Llama-shaped decoder; ``fp8`` keeps the linear layers as float8_e4m3 with one
    scale each (``torch._scaled_mm``), the rest BF16."""

    def __init__(self, shape: dict[str, int], fp8: bool = False) -> None:
        self.s = s = shape
        self.fp8 = fp8
        h, d = s["hidden"], s["head_dim"]
        qkv = (s["heads"] + 2 * s["kv_heads"]) * d
        dev = "cuda"
        self.layers = []
        for _ in range(s["layers"]):
            self.layers.append(
                {
                    "qkv": self._w(qkv, h),
                    "o": self._w(h, s["heads"] * d),
                    "gate_up": self._w(2 * s["inter"], h),
                    "down": self._w(h, s["inter"]),
                    "n1": torch.ones(h, device=dev, dtype=torch.bfloat16),
                    "n2": torch.ones(h, device=dev, dtype=torch.bfloat16),
                }
            )
        self.norm = torch.ones(h, device=dev, dtype=torch.bfloat16)
        self.lm_head = torch.randn(s["vocab"], h, device=dev, dtype=torch.bfloat16) * 0.02
        self.one = torch.ones((), device=dev, dtype=torch.float32)

    def _w(self, n: int, k: int) -> torch.Tensor:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        return w.to(torch.float8_e4m3fn) if self.fp8 else w

    def weight_bytes(self) -> int:
        n = sum(t.numel() * t.element_size() for layer in self.layers for t in layer.values())
        return n + self.lm_head.numel() * 2

    def linear_params(self) -> int:
        return sum(layer[k].numel() for layer in self.layers for k in ("qkv", "o", "gate_up", "down"))

    def mm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if not self.fp8:
            return x @ w.t()
        return torch._scaled_mm(x.to(torch.float8_e4m3fn), w.t(), self.one, self.one, out_dtype=torch.bfloat16)

    def forward(
        self, x: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]] | None, prefill: bool
    ) -> torch.Tensor:
        """``x`` [T, hidden]. Decode: T requests, one token each, attending to their caches
        [T, kv_heads, ctx, d]. Prefill: T tokens of one sequence, causal."""
        s = self.s
        hq, hk, d = s["heads"], s["kv_heads"], s["head_dim"]
        g = hq // hk
        t = x.shape[0]
        for i, w in enumerate(self.layers):
            y = F.rms_norm(x, (s["hidden"],), w["n1"])
            qkv = self.mm(y, w["qkv"])
            q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
            if prefill:
                q = q.view(t, hq, d).transpose(0, 1).unsqueeze(0)
                k = k.view(t, hk, d).transpose(0, 1).unsqueeze(0)
                v = v.view(t, hk, d).transpose(0, 1).unsqueeze(0)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                a = a.squeeze(0).transpose(0, 1).reshape(t, hq * d)
            else:
                kc, vc = cache[i]  # type: ignore[index]
                kc[:, :, -1].copy_(k.view(t, hk, d))
                vc[:, :, -1].copy_(v.view(t, hk, d))
                # GQA decode as attention of g "positions" per KV head: each head's cache read once
                qg = q.view(t, hk, g, d)
                a = F.scaled_dot_product_attention(qg, kc, vc).reshape(t, hq * d)
            x = x + self.mm(a, w["o"])
            y = F.rms_norm(x, (s["hidden"],), w["n2"])
            gu = self.mm(y, w["gate_up"])
            gate, up = gu.chunk(2, dim=-1)
            x = x + self.mm(F.silu(gate) * up, w["down"])
        x = F.rms_norm(x, (s["hidden"],), self.norm)
        return x @ self.lm_head.t()


def decode_point(m: Model, batch: int, ctx: int, repeats: int) -> dict:
    s = m.s
    cache = [
        (
            torch.randn(batch, s["kv_heads"], ctx, s["head_dim"], device="cuda", dtype=torch.bfloat16),
            torch.randn(batch, s["kv_heads"], ctx, s["head_dim"], device="cuda", dtype=torch.bfloat16),
        )
        for _ in range(s["layers"])
    ]
    x = torch.randn(batch, s["hidden"], device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            m.forward(x, cache, prefill=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        m.forward(x, cache, prefill=False)
    ms = timed(graph.replay, repeats)
    kv_bytes = 2 * s["layers"] * batch * ctx * s["kv_heads"] * s["head_dim"] * 2
    del graph, cache
    torch.cuda.empty_cache()
    return point("decode", m, batch, ctx, ms, kv_bytes, batch)


def prefill_point(m: Model, tokens: int, repeats: int) -> dict:
    x = torch.randn(tokens, m.s["hidden"], device="cuda", dtype=torch.bfloat16)
    ms = timed(lambda: m.forward(x, None, prefill=True), repeats, warmup=2)
    return point("prefill", m, 1, tokens, ms, 0, tokens)


def point(kind: str, m: Model, batch: int, ctx: int, ms: list[float], kv_bytes: int, tokens: int) -> dict:
    s = m.s
    attn_pairs = batch * ctx if kind == "decode" else tokens * (tokens + 1) / 2
    attn_flops = 4.0 * s["heads"] * s["head_dim"] * attn_pairs * s["layers"]
    flops = 2.0 * (m.linear_params() + m.lm_head.numel()) * tokens + attn_flops
    med = statistics.median(ms)
    return {
        "kind": kind,
        "batch": batch,
        "ctx": ctx,
        "tokens": tokens,
        "ms_median": med,
        "ms_min": min(ms),
        "ms_max": max(ms),
        "repeats": len(ms),
        "weight_bytes": m.weight_bytes(),
        "kv_bytes": kv_bytes,
        "flops": flops,
    }


def ceilings() -> dict:
    """Copy bandwidth (bytes read and written) and dense BF16/FP8 matrix rates at 8192^3."""
    out: dict = {}
    a = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = statistics.median(timed(lambda: b.copy_(a), 10))
    out["copy_tb_s"] = 2 * a.numel() / (ms / 1e3) / 1e12
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = statistics.median(timed(lambda: x @ y, 10))
    out["bf16_gemm_tflops"] = 2 * n**3 / (ms / 1e3) / 1e12
    try:
        x8, y8 = x.to(torch.float8_e4m3fn), y.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.ones((), device="cuda")
        ms = statistics.median(timed(lambda: torch._scaled_mm(x8, y8, one, one, out_dtype=torch.bfloat16), 10))
        out["fp8_gemm_tflops"] = 2 * n**3 / (ms / 1e3) / 1e12
    except Exception as e:  # a probe: say what failed, measure the rest
        out["fp8_gemm_error"] = repr(e)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="step_probe.json")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--bw-tb-s", type=float, default=4.8)
    ap.add_argument("--bf16-tflops", type=float, default=989.0)
    ap.add_argument("--fp8-70b", action="store_true")
    ap.add_argument(
        "--holdout-only",
        action="store_true",
        help="only Qwen3-32B's shape in BF16 (64 layers, hidden 5120, MLP 25600): steps the fit never saw",
    )
    args = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    res: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "points": []}

    res.update(ceilings())
    torch.cuda.empty_cache()
    print(json.dumps({k: v for k, v in res.items() if k != "points"}), flush=True)

    with torch.no_grad():
        if args.holdout_only:
            holdout(res, args.repeats)
        else:
            fitted(res, args)
    finish(res, args, t0)


def holdout(res: dict, repeats: int) -> None:
    """Qwen3-32B's shape in BF16: a deeper, wider model than the fit's, for a check the fit never saw."""
    m = Model(QWEN3_32B)
    for batch, ctx in [(1, 2048), (16, 2048), (64, 2048), (128, 1024), (32, 4096)]:
        p = decode_point(m, batch, ctx, repeats)
        p["model"] = "qwen3-32b-bf16"
        res["points"].append(p)
        print(json.dumps(p), flush=True)
    for tokens in (1024, 4096):
        p = prefill_point(m, tokens, 5)
        p["model"] = "qwen3-32b-bf16"
        res["points"].append(p)
        print(json.dumps(p), flush=True)


def fitted(res: dict, args: argparse.Namespace) -> None:
    """The steps the generic constants were fitted on: Llama-3.1-8B BF16, with --fp8-70b Llama-3.3-70B FP8."""
    m = Model(LLAMA_8B)
    for batch, ctx in [
        (1, 1024),
        (8, 1024),
        (32, 1024),
        (64, 1024),
        (128, 1024),
        (256, 1024),
        (32, 256),
        (32, 4096),
        (32, 16384),
        (128, 4096),
    ]:
        p = decode_point(m, batch, ctx, args.repeats)
        p["model"] = "llama-8b-bf16"
        res["points"].append(p)
        print(json.dumps(p), flush=True)
    for tokens in (512, 2048, 8192):
        p = prefill_point(m, tokens, 5)
        p["model"] = "llama-8b-bf16"
        res["points"].append(p)
        print(json.dumps(p), flush=True)
    del m
    torch.cuda.empty_cache()
    if args.fp8_70b:
        try:
            m = Model(LLAMA_70B, fp8=True)
            for batch, ctx in [(16, 1024), (64, 1024), (128, 1024)]:
                p = decode_point(m, batch, ctx, args.repeats)
                p["model"] = "llama-70b-fp8"
                res["points"].append(p)
                print(json.dumps(p), flush=True)
            p = prefill_point(m, 4096, 5)
            p["model"] = "llama-70b-fp8"
            res["points"].append(p)
            print(json.dumps(p), flush=True)
        except Exception as e:
            res["fp8_70b_error"] = repr(e)
            print("fp8 70b:", repr(e), flush=True)


def finish(res: dict, args: argparse.Namespace, t0: float) -> None:
    for p in res["points"]:
        sec = p["ms_median"] / 1e3
        p["bw_share"] = (p["weight_bytes"] + p["kv_bytes"]) / sec / (args.bw_tb_s * 1e12)
        p["bf16_share"] = p["flops"] / sec / (args.bf16_tflops * 1e12)
    res["seconds"] = time.time() - t0
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"done in {res['seconds']:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
