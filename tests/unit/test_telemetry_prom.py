"""Prometheus exposition parsing and the SGLang / vLLM / DCGM / nvidia-smi mappings."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadgen.telemetry import prom
from loadgen.telemetry.dcgm import dcgm_samples
from loadgen.telemetry.fetch import FetchError
from loadgen.telemetry.server import ServerMetricsSampler, map_metrics
from loadgen.telemetry.smi import SmiParser, is_streaming, query_fields

SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="0"} 57.0
sglang:num_running_reqs{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="1"} 57.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="0"} 12.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="0"} 0.93
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="0"} 665690.0
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="0"} 3.41
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="0"} 0.0
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{engine_type="unified",model_name="kimi-k2",pp_rank="0",tp_rank="0"} 7.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="kimi-k2"} 120000.0
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="kimi-k2"} 30000.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="kimi-k2"} 88000.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="kimi-k2"} 10.0
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="kimi-k2"} 40.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="kimi-k2"} 50.0
sglang:time_to_first_token_seconds_sum{model_name="kimi-k2"} 17.5
sglang:time_to_first_token_seconds_count{model_name="kimi-k2"} 50.0
"""

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 30.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-8B"} 28.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-8B"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.71
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.64
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-8B"} 4.0
vllm:num_preemptions_total{engine="1",model_name="Qwen/Qwen3-8B"} 2.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-8B"} 1000.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-8B"} 250.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3-8B"} 400.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 900.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 380.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="Qwen/Qwen3-8B"} 90.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="Qwen/Qwen3-8B"} 10.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9"} 1.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="Qwen/Qwen3-8B"} 5.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"} 100.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="Qwen/Qwen3-8B"} 812.25
vllm:e2e_request_latency_seconds_count{engine="0",model_name="Qwen/Qwen3-8B"} 100.0
"""


def test_parser_reads_names_labels_values_and_types() -> None:
    expo = prom.parse(SGLANG)
    running = expo.series("sglang:num_running_reqs")
    assert len(running) == 2
    assert running[1].labels == {"engine_type": "unified", "model_name": "kimi-k2", "pp_rank": "0", "tp_rank": "1"}
    assert running[1].value == 57.0
    assert expo.types["sglang:num_retracted_requests_total"] == "counter"
    assert expo.types["sglang:time_to_first_token_seconds"] == "histogram"
    assert expo.bad_lines == 0


def test_histograms_are_read_with_buckets_sum_and_count() -> None:
    h = prom.parse(SGLANG).histogram("sglang:time_to_first_token_seconds")
    assert h is not None
    assert h.buckets == [(0.1, 10.0), (0.5, 40.0), (math.inf, 50.0)]
    assert (h.sum, h.count) == (17.5, 50.0)
    assert prom.parse(VLLM).histogram("vllm:e2e_request_latency_seconds").sum == 812.25  # type: ignore[union-attr]
    assert prom.parse(VLLM).histogram("vllm:no_such") is None


def test_escaped_label_values_timestamps_and_special_values() -> None:
    text = (
        'm{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",comma="x,y",brace="}"} 1.5 1700000000000\n'
        "n NaN\n"
        'p{le="+Inf"} +Inf\n'
        "q -Inf\n"
        'broken{unterminated="x} 1\n'
        "nolabel_no_value\n"
    )
    expo = prom.parse(text)
    m = expo.series("m")[0]
    assert m.labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb", "comma": "x,y", "brace": "}"}
    assert m.value == 1.5
    assert math.isnan(expo.series("n")[0].value)
    assert expo.series("p")[0].value == math.inf
    assert expo.series("q")[0].value == -math.inf
    assert expo.bad_lines == 2


def test_sglang_names_are_recognised() -> None:
    rec = map_metrics(prom.parse(SGLANG))
    assert rec["engine"] == "sglang"
    assert rec["running"] == 57  # reported by two TP ranks: one value, not 114
    assert rec["queued"] == 12
    assert rec["kv_usage"] == 0.93
    assert rec["spec_accept_len"] == 3.41
    assert rec["preemptions_total"] == 7.0
    assert rec["prefix_hits_total"] == 30000.0 and rec["prefix_queries_total"] == 120000.0
    assert rec["gen_tokens_total"] == 88000.0
    assert rec["kv_capacity_tokens"] == 665690.0


def test_vllm_names_are_recognised_and_engines_summed() -> None:
    rec = map_metrics(prom.parse(VLLM))
    assert rec["engine"] == "vllm"
    assert rec["running"] == 58 and rec["queued"] == 4
    assert rec["kv_usage"] == 0.71  # the fullest engine
    assert rec["preemptions_total"] == 6.0
    assert (rec["spec_drafts_total"], rec["spec_accepted_total"]) == (400.0, 900.0)
    assert (rec["prefix_hits_total"], rec["prefix_queries_total"]) == (250.0, 1000.0)
    assert rec["requests_total"] == 100.0


def test_vllm_cache_config_info_gives_the_pool_less_its_null_block_and_the_block_size() -> None:
    # the labels vLLM 0.32 (CPU build) exported with --num-gpu-blocks-override 16, abridged
    info = (
        'vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",'
        'kv_cache_size_tokens="2048",num_gpu_blocks="16",num_gpu_blocks_override="16"} 1.0\n'
    )
    rec = map_metrics(prom.parse(VLLM + "# TYPE vllm:cache_config_info gauge\n" + info))
    assert rec["kv_capacity_tokens"] == 15 * 128 and rec["kv_block_tokens"] == 128
    unsized = info.replace('num_gpu_blocks="16"', 'num_gpu_blocks="None"')
    rec = map_metrics(prom.parse(VLLM + unsized))
    assert "kv_capacity_tokens" not in rec


def test_a_user_mapping_reads_other_servers() -> None:
    text = "# TYPE trt_active gauge\ntrt_active 9\ntrt_waiting 2\ntrt_kv_frac 0.5\n"
    rec = map_metrics(prom.parse(text), {"running": "trt_active", "queued": "trt_waiting", "kv_usage": "trt_kv_frac"})
    assert rec == {"t_ns": 0, "src": "server", "engine": "custom", "running": 9, "queued": 2, "kv_usage": 0.5}


@pytest.fixture
def metrics_server() -> Iterator[tuple[str, dict[str, object]]]:
    state: dict[str, object] = {"body": VLLM, "code": 200}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            body = str(state["body"]).encode()
            self.send_response(int(state["code"]))  # type: ignore[call-overload]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics", state
    httpd.shutdown()
    httpd.server_close()


def test_server_sampler_scrapes_a_real_endpoint(metrics_server: tuple[str, dict[str, object]]) -> None:
    url, state = metrics_server
    sampler = ServerMetricsSampler(url, period_s=1.0)
    sampler.open(lambda _e: None)
    (rec,) = sampler.sample()
    assert rec["src"] == "server" and rec["engine"] == "vllm" and rec["running"] == 58
    state["code"] = 503
    with pytest.raises(FetchError, match="HTTP 503"):
        sampler.sample()


def test_server_sampler_reports_connection_refused() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    sampler = ServerMetricsSampler(f"http://127.0.0.1:{port}/metrics")
    with pytest.raises(FetchError, match=f"cannot reach http://127.0.0.1:{port}/metrics"):
        sampler.sample()


DCGM = """\
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H200",Hostname="h"} 402.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA H200",Hostname="h"} 398.0
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-aaaa"} 123456789
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-bbbb"} 223456789
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa"} 100
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaaa"} 130000
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaaa"} 10000
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-aaaa"} 1980
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaaa"} 61
"""


def test_dcgm_exposition_becomes_gpu_samples() -> None:
    g0, g1 = dcgm_samples(prom.parse(DCGM), 5)
    assert (g0["gpu"], g0["uuid"], g0["source"]) == (0, "GPU-aaaa", "dcgm")
    assert g0["power_w"] == 402.5 and g0["power_kind"] == "average"
    assert g0["energy_mj"] == 123456789
    assert g0["util_gpu"] == 100 and g0["sm_clock_mhz"] == 1980 and g0["temp_c"] == 61
    assert g0["mem_used_b"] == 130000 << 20 and g0["mem_total_b"] == 140000 << 20
    assert g1["power_w"] == 398.0 and g1["util_gpu"] is None


def test_nvidia_smi_csv_with_header_and_units() -> None:
    argv = [
        "ssh",
        "gpu",
        "nvidia-smi",
        "--query-gpu=index,power.draw,power.draw.instant,enforced.power.limit,"
        "utilization.gpu,memory.used,clocks.sm,clocks_event_reasons.active,temperature.gpu",
        "--format=csv",
        "-lms",
        "200",
    ]
    assert is_streaming(argv) and not is_streaming(argv[:-2])
    parser = SmiParser(query_fields(argv))
    header = (
        "index, power.draw [W], power.draw.instant [W], enforced.power.limit [W], utilization.gpu [%], "
        "memory.used [MiB], clocks.sm [MHz], clocks_event_reasons.active, temperature.gpu"
    )
    assert parser.feed(header, 1) == []
    (rec,) = parser.feed("1, 412.30 W, 455.10 W, 700.00 W, 100 %, 81559 MiB, 1980 MHz, 0x0000000000000004, 63", 7)
    assert rec["t_ns"] == 7 and rec["gpu"] == 1 and rec["source"] == "smi"
    assert rec["power_w"] == 455.1 and rec["power_kind"] == "instant" and rec["power_avg_w"] == 412.3
    assert rec["power_limit_w"] == 700.0 and rec["util_gpu"] == 100 and rec["mem_used_b"] == 81559 << 20
    assert rec["sm_clock_mhz"] == 1980 and rec["clock_reasons"] == 4 and rec["temp_c"] == 63.0
    (rec,) = parser.feed("0, [N/A], [Not Supported], 700.00 W, 0 %, 10 MiB, 345 MHz, 0x1, 30", 8)
    assert rec["power_w"] is None and rec["power_avg_w"] is None and rec["util_gpu"] == 0


def test_nvidia_smi_noheader_nounits_takes_names_from_the_command() -> None:
    argv = ["nvidia-smi", "--query-gpu", "index,power.draw,utilization.gpu", "--format=csv,noheader,nounits"]
    parser = SmiParser(query_fields(argv))
    (rec,) = parser.feed("0, 300.5, 97", 1)
    assert rec["power_w"] == 300.5 and rec["power_kind"] == "average" and rec["util_gpu"] == 97
    assert parser.feed("0, 300.5", 2) == []  # wrong column count: ignored, not misassigned
