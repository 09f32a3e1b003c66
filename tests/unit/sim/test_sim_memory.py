"""Start-up memory model (loadgen/sim/memory.py): the whole start/fail matrix and the story's pair.

Every hardware part x model part x spec part is started with its model's shipped server settings
(Kimi: the seed's, mfs 0.9, cuda_graph_max_bs 512; Llama: the h200-llama-8b profile's, mfs 0.88,
cuda_graph_max_bs 256; tiny: the tiny profile's), TP = the hardware's GPU count, at the
max_running_requests values that matter: 48 (SGLang's default with speculative decoding), 64, 128
(the seed's) and 256 (the story's failing restart). ``expected`` states, from the deployments'
facts and not from the model, which cells fail and why; every other cell must start.

``python tests/unit/sim/test_sim_memory.py`` prints the table of docs/simulator.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sim_testutil import SimProc

from loadgen.sim.memory import FAIL_DEVICES, FAIL_GRAPHS, FAIL_KV_POOL, FAIL_WEIGHTS, MemoryPlan, memory_plan
from loadgen.sim.profile import Profile, apply_overrides, load_part, load_profile, part_names

DOC = Path(__file__).resolve().parents[3] / "docs" / "simulator.md"
BASE = {"kimi-k2.6": "b300x8-kimi-k2.6-ddtree", "llama-8b": "h200-llama-8b", "tiny": "tiny"}
MAX_RUNNING = (48, 64, 128, 256)
HARDWARE, MODELS, SPECS = part_names("hardware"), part_names("model"), part_names("spec")
CELLS = [(hw, m, sp, n) for hw in HARDWARE for m in MODELS for sp in SPECS for n in MAX_RUNNING]
GB = 1e9


def cell(hardware: str, model: str, spec: str, max_running: int) -> Profile:
    p = load_profile(BASE[model], hardware=hardware, model=model, spec=spec)
    return apply_overrides(p, {"server.tp": p.hardware.gpus, "server.max_running_requests": max_running})


def expected(hardware: str, model: str, spec: str, max_running: int) -> tuple[str | None, str]:
    """Where the deployment fails (a ``FAIL_*``) and why; (None, "") where it starts."""
    node = load_part("hardware", hardware).gpus > 1
    heavy_drafter = spec in ("dflash", "ddtree")  # the Kimi DFlash drafter, 6.5 GB
    if model == "kimi-k2.6":
        if not node:
            return FAIL_WEIGHTS, "the 594 GB INT4 checkpoint on one GPU of at most 275 GB"
        if hardware in ("h100x8", "a100-sxmx8"):
            return FAIL_KV_POOL, "76 GB of weights per GPU fill 0.9 x 80 GB: no room for a KV pool"
        if hardware == "l40sx8":
            return FAIL_WEIGHTS, "8 x 45 GB = 360 GB of GDDR for a 594 GB checkpoint"
        if spec == "ddtree" and max_running == 128 and hardware == "rtx-pro-6000x8":
            return FAIL_GRAPHS, "an 8,320-token verify graph in the 9.6 GB left beside 74 GB of weights per card"
        if spec == "ddtree" and max_running == 256:
            return FAIL_GRAPHS, "the story: a 256 x 65 = 16,640-token verify graph (~29 GB) > the 10 % headroom"
        if spec == "ddtree" and max_running == 128 and hardware == "h200x8":
            return FAIL_GRAPHS, "an 8,320-token verify graph (14.6 GB) in 14 GB: half the story's graph and headroom"
    if model == "llama-8b":
        if hardware == "tiny" and heavy_drafter:
            return FAIL_KV_POOL, "16 GB of weights + the 6.5 GB drafter > 0.88 x 24 GB"
        hopper = hardware in ("h100", "h100x8", "h200", "h200x8")
        if spec == "ddtree" and max_running == 256 and hopper:
            return FAIL_GRAPHS, "16,640 tokens of 128,256-entry logits (12.8 GB) > 12 % of 80/141 GB"
        small = ("a100-sxm", "a100-sxmx8", "l40s", "l40sx8")
        if spec == "ddtree" and max_running == 256 and (hardware in small or hardware.startswith("rtx-pro-6000")):
            return FAIL_GRAPHS, "16,640 tokens of logits (12.8 GB) > 12 % of 45-96 GB"
        if spec == "ddtree" and max_running == 128 and hardware in small:
            return FAIL_GRAPHS, "8,320 tokens of logits (6.4 GB) + the tree mask + drafter graphs > 12 % of 45/80 GB"
        if spec == "ddtree" and max_running == 128 and hardware in ("h100", "h100x8"):
            return FAIL_GRAPHS, "8,320 tokens of logits (6.4 GB) + the tree mask (1.1 GB) + drafter graphs > 9.6 GB"
    return None, ""


@pytest.mark.parametrize(
    ("hardware", "model", "spec", "max_running"), CELLS, ids=["-".join(map(str, c)) for c in CELLS]
)
def test_start_fail_matrix(hardware: str, model: str, spec: str, max_running: int) -> None:
    want, why = expected(hardware, model, spec, max_running)
    plan = memory_plan(cell(hardware, model, spec, max_running))
    assert plan.failure == want, f"{why or 'should start'}; plan: {describe(plan)}"


def test_the_brief_cases_start() -> None:
    # the issue's command: Kimi K2.6 INT4 TP8 on 8x H200 without speculative decoding
    plain = memory_plan(load_profile("b300x8-kimi-k2.6-ddtree", hardware="h200x8", spec="none"))
    assert plain.failure is None and 0.6e6 < plain.kv_pool_tokens < 0.8e6  # study §5.6: ~0.63 M tokens
    # with DDTree at SGLang's speculative default of 48 requests, and at 128 once the headroom is raised
    p = load_profile("b300x8-kimi-k2.6-ddtree", hardware="h200x8")
    assert memory_plan(apply_overrides(p, {"server.max_running_requests": 48})).failure is None
    assert memory_plan(p).failure == FAIL_GRAPHS
    # the log's own remedies both work: a smaller static fraction, or fewer captured batch sizes
    assert memory_plan(apply_overrides(p, {"server.mem_fraction_static": 0.85})).failure is None
    assert memory_plan(apply_overrides(p, {"server.cuda_graph_max_bs": 64})).failure is None
    for name in ("h100-llama-8b", "h200-llama-8b"):
        assert memory_plan(load_profile(name)).failure is None


def test_more_tp_ranks_than_gpus_fails() -> None:
    assert memory_plan(load_profile("b300x8-kimi-k2.6-ddtree", hardware="h200")).failure == FAIL_DEVICES


def test_terms_are_physical() -> None:
    p = load_profile("b300x8-kimi-k2.6-ddtree")
    m, hw = p.model, p.hardware
    at = {n: memory_plan(apply_overrides(p, {"server.max_running_requests": n})) for n in (64, 128, 256)}
    plan = at[128]
    # weights: sharded part over TP plus the replicated part; the drafter over TP
    assert plan.weight_bytes == pytest.approx(
        (m.weight_bytes - m.replicated_weight_bytes) / 8 + m.replicated_weight_bytes
    )
    assert 75 * GB < plan.weight_bytes < 78 * GB and plan.drafter_bytes == pytest.approx(6.5e9 / 8)
    # KV pool: the static fraction minus weights and runtime, in MLA cells (not split) + drafter cells
    static = p.server.mem_fraction_static * hw.hbm_gb * GB
    assert plan.kv_pool_bytes == pytest.approx(static - plan.runtime_bytes - plan.weight_bytes - plan.drafter_bytes)
    assert plan.kv_cell_bytes == pytest.approx(70272 + 20480 / 8)
    assert len({pl.kv_pool_tokens for pl in at.values()}) == 1  # max_running_requests does not size the pool
    # graphs grow with tokens per captured forward: batch x verify width
    assert [at[n].graph_tokens for n in (64, 128, 256)] == [64 * 65, 128 * 65, 256 * 65]
    assert at[256].activation_bytes == pytest.approx(2 * at[128].activation_bytes)
    assert at[256].moe_bytes == pytest.approx(2 * at[128].moe_bytes)
    assert plan.moe_bytes == pytest.approx(128 * 65 * 8 * (7168 + 3 * 2048 / 8) * 2)
    # the same batch without speculative decoding captures 65x fewer tokens
    ar = memory_plan(load_profile("b300x8-kimi-k2.6-ar"))
    assert ar.graph_tokens == 128 and ar.activation_bytes == pytest.approx(plan.activation_bytes / 65, rel=0.2)
    assert ar.headroom_left_bytes > 25 * GB


def test_story_pair_through_the_server_start_up(tmp_path: Path) -> None:
    """DDTree budget 64 on 8x B300: 128 starts, 256 fails in CUDA-graph capture with SGLang's lines."""
    flags = ("--profile", "b300x8-kimi-k2.6-ddtree", "--startup-s", "0.1")
    ok_log, bad_log = tmp_path / "128.log", tmp_path / "256.log"
    ok = SimProc(tmp_path, *flags, "--max-running-requests", "128", "--log-file", str(ok_log))
    try:
        assert ok.get("/health")[0] == 200
    finally:
        ok.stop()
    text = ok_log.read_text()
    assert "Capture cuda graph bs [1, 2, 4" in text and "Capture cuda graph end." in text
    assert "The server is fired up and ready to roll!" in text
    bad = SimProc(tmp_path, *flags, "--max-running-requests", "256", "--log-file", str(bad_log), wait_ready=False)
    assert bad.proc.wait(timeout=10) == 1
    bad.stop()
    text = bad_log.read_text()
    assert "KV Cache is allocated. #tokens: " in text and "Capture cuda graph begin." in text
    assert (
        "Scheduler hit an exception: Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate"
        in text
    )
    assert "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)" in text
    assert "The server is fired up" not in text


def test_issue_command_starts_through_the_server(tmp_path: Path) -> None:
    log = tmp_path / "h200.log"
    proc = SimProc(
        tmp_path, "--hardware", "h200x8", "--model-config", "kimi-k2.6", "--spec", "none", "--startup-s", "0.1",
        "--log-file", str(log),
    )  # fmt: skip
    try:
        assert proc.get("/health")[0] == 200
    finally:
        proc.stop()
    assert "Capture cuda graph end." in log.read_text()


# -- the table of docs/simulator.md ------------------------------------------------------------------

DOC_HARDWARE = ("h100", "h100x8", "h200", "h200x8", "b200", "b200x8", "b300", "b300x8")
DOC_MODELS = ("kimi-k2.6", "llama-8b")
DOC_SPECS = ("none", "dflash", "ddtree")
SHORT = {None: "ok", FAIL_WEIGHTS: "weights", FAIL_KV_POOL: "KV pool", FAIL_GRAPHS: "graphs", FAIL_DEVICES: "TP"}


def describe(plan: MemoryPlan) -> str:
    return (
        f"weights {plan.weight_bytes / GB:.1f}+{plan.drafter_bytes / GB:.1f} GB, "
        f"KV pool {plan.kv_pool_bytes / GB:.1f} GB, "
        f"graphs {plan.graph_bytes / GB:.2f} GB of headroom {plan.headroom_bytes / GB:.2f} GB"
    )


def matrix_table() -> str:
    """Markdown rows: the breakdown at 128 running requests, and the outcome at each MAX_RUNNING."""
    lines = [
        "| hardware | model | spec | weights | KV pool (tokens) | graphs + act. | MoE | headroom (left) "
        "| " + " / ".join(map(str, MAX_RUNNING)) + " |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for hw in DOC_HARDWARE:
        for model in DOC_MODELS:
            for spec in DOC_SPECS:
                plan = memory_plan(cell(hw, model, spec, 128))
                outcome = " / ".join(SHORT[memory_plan(cell(hw, model, spec, n)).failure] for n in MAX_RUNNING)
                weights = f"{(plan.weight_bytes + plan.drafter_bytes) / GB:.1f}"
                if plan.failure in (FAIL_WEIGHTS, FAIL_KV_POOL, FAIL_DEVICES):
                    lines.append(f"| {hw} | {model} | {spec} | {weights} | – | – | – | – | {outcome} |")
                    continue
                graphs = (plan.graph_bytes - plan.moe_bytes) / GB
                lines.append(
                    f"| {hw} | {model} | {spec} | {weights} | {plan.kv_pool_bytes / GB:.1f} "
                    f"({plan.kv_pool_tokens / 1e6:.2f} M) | {graphs:.1f} | {plan.moe_bytes / GB:.2f} | "
                    f"{plan.headroom_bytes / GB:.1f} ({plan.headroom_left_bytes / GB:+.1f}) | {outcome} |"
                )
    return "\n".join(lines)


STORY_ROWS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("b300x8", "ddtree", {"server.max_running_requests": 128}),
    ("b300x8", "ddtree", {"server.max_running_requests": 256}),
    ("b300x8", "none", {"server.max_running_requests": 256}),
    ("h200x8", "none", {"server.max_running_requests": 128}),
    ("h200x8", "ddtree", {"server.max_running_requests": 48}),
    ("h200x8", "ddtree", {"server.max_running_requests": 128}),
    ("h200x8", "ddtree", {"server.max_running_requests": 128, "server.mem_fraction_static": 0.85}),
    ("h200x8", "ddtree", {"server.max_running_requests": 128, "server.cuda_graph_max_bs": 64}),
)


def story_table() -> str:
    """Markdown rows: every term for the story's pair and Kimi K2.6 on 8x H200 (GB per GPU)."""
    lines = [
        "| hardware | spec | settings | weights + drafter | runtime | KV pool | req table + attention | "
        "activations | MoE | drafter graphs | headroom | left | start-up |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for hw, spec, overrides in STORY_ROWS:
        p = apply_overrides(load_profile("b300x8-kimi-k2.6-ddtree", hardware=hw, spec=spec), overrides)
        pl = memory_plan(p)
        settings = ", ".join(f"{k.split('.')[1]}={v}" for k, v in overrides.items())
        lines.append(
            f"| {hw} | {spec} | {settings} | {pl.weight_bytes / GB:.1f} + {pl.drafter_bytes / GB:.2f} | "
            f"{pl.runtime_bytes / GB:.1f} | {pl.kv_pool_bytes / GB:.1f} | "
            f"{(pl.table_bytes + pl.attn_bytes) / GB:.2f} | "
            f"{pl.activation_bytes / GB:.2f} | {pl.moe_bytes / GB:.2f} | {pl.draft_graph_bytes / GB:.2f} | "
            f"{pl.headroom_bytes / GB:.1f} | {pl.headroom_left_bytes / GB:+.2f} | {SHORT[pl.failure]} |"
        )
    return "\n".join(lines)


def test_docs_tables_are_current() -> None:
    text = DOC.read_text()
    for table in (story_table(), matrix_table()):
        assert table in text, "regenerate: python tests/unit/sim/test_sim_memory.py"


if __name__ == "__main__":
    sys.stdout.write(story_table() + "\n\n" + matrix_table() + "\n")


def test_graph_capture_oom_names_the_allocation_that_failed_and_what_was_free() -> None:
    from loadgen.sim.serverlog import _failing_allocation

    # shares by batch size, largest first: 8 -> 5.33 GiB fits in 6, then 4 -> 2.67 GiB does not
    tried, free = _failing_allocation(10.0, 6.0, [1, 2, 4, 8])
    assert abs(tried - 10 * 4 / 15) < 1e-9 and abs(free - (6.0 - 10 * 8 / 15)) < 1e-9
    assert 0 < free < tried
