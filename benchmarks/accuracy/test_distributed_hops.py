"""Two workers on hosts of their own, the server's way out 20 ms long and one worker's wall clock
300 ms ahead: every request once in the master's run directory, and the first token on both
workers' records one hop after the server sent it, to the millisecond (issue 30). An accuracy
check that needs the machine alone (network namespaces, tests/netns.py; skipped with the reason
where they cannot be made); the helpers are the suite's distributed tests'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import clockskew
from tests.conftest import emissions_by_request, run_records
from tests.integration.test_distributed_netns import DELAY_MS, SKEW_NS, _master, _start_sim, _worker
from tests.netns import hosts_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]


def test_two_workers_on_other_hosts_record_every_request_once_with_the_hops_delay(tmp_path: Path) -> None:
    """The server's way out 20 ms long, and worker wb's wall clock 300 ms ahead of everyone's (an
    NTP gone wrong): its records land on the master's clock all the same."""
    with hosts_or_skip("srv", "mst", "wa", "wb") as hosts:
        print(hosts.netem("srv", DELAY_MS))
        skew = clockskew.build(tmp_path)
        skew_ns = SKEW_NS if isinstance(skew, Path) else 0
        print(f"wb's clock {skew_ns / 1e6:+g} ms" + ("" if isinstance(skew, Path) else f" ({skew})"))
        emission_log = _start_sim(hosts, tmp_path)
        master = _master(hosts, tmp_path, "--concurrency", "8", "--step-seconds", "4", "--warmup-seconds", "0.5")
        workers = [
            _worker(hosts, "wa", tmp_path),
            _worker(hosts, "wb", tmp_path, env=clockskew.skewed_env(skew, skew_ns) if isinstance(skew, Path) else None),
        ]
        out, err = master.communicate(timeout=180)
        assert master.returncode == 0, err[-3000:]
        for w in workers:
            assert w.wait(30) == 0, w.stderr.read() if w.stderr else ""
        run_dir = Path(out.strip().splitlines()[-1])
        recs = run_records(run_dir)
        # every request the server saw is in the master's run directory, once, from both workers
        ids = [r["header_id"] for r in recs]
        emitted = emissions_by_request(emission_log)
        assert len(ids) == len(set(ids)) and set(ids) == set(emitted)
        assert {r["worker"] for r in recs} == {"w0", "w1"}
        assert sorted(f.name for f in run_dir.glob("requests*.jsonl")) == ["requests-w0.jsonl", "requests-w1.jsonl"]
        # each worker's clock was measured when it joined: wa's reads the master's within the hop,
        # wb's the skew, and wb moves its records onto the master's clock
        manifest = json.loads((run_dir / "manifest.json").read_text())
        joined = manifest["workers"]
        assert sorted(w["worker"] for w in joined) == ["w0", "w1"]
        on_wa = next(w for w in joined if abs(w["clock_offset_ns"]) < w["clock_rtt_ns"])
        assert not on_wa["follows_master_clock"]
        if skew_ns:
            on_wb = next(w for w in joined if w is not on_wa)
            assert abs(on_wb["clock_offset_ns"] - skew_ns) < max(on_wb["clock_rtt_ns"], 1e6), on_wb
            assert on_wb["follows_master_clock"]
        # the first token arrives one netem delay after the server sent it, on both workers' records
        # The user-space netem is a process: where the scheduler or the hypervisor took its CPU away
        # (it says when), the packets it held then were late by up to that span, on the wire as in
        # the records. Those first tokens are left out of the millisecond check, and counted.
        stalls = hosts.netem_counts("srv").get("stalls", [])
        hop_ns = DELAY_MS * 1e6

        def in_stall(emit_ns: int) -> bool:
            return any(a - hop_ns - 1e6 <= emit_ns <= b + 1e6 for a, b in stalls)

        firsts = [
            (r["sent_ns"] + r["chunk_offsets_ns"][0], emitted[r["header_id"]][0]["emit_ns"])
            for r in recs
            if r["error_class"] is None
        ]
        late = np.array([(got - emit) / 1e6 for got, emit in firsts if not in_stall(emit)])
        left_out = len(firsts) - len(late)
        extra = late - DELAY_MS
        assert len(late) >= max(40, len(firsts) // 2), (left_out, len(firsts), stalls)
        assert extra.min() > -0.5, extra.min()
        assert np.percentile(extra, 99) < 1.0, (np.sort(extra)[-5:], stalls)
        print(
            f"first token after the server sent it, less {DELAY_MS:g} ms: p50 {np.percentile(extra, 50):.2f} ms, "
            f"p99 {np.percentile(extra, 99):.2f} ms, max {extra.max():.2f} ms over {len(extra)} requests "
            f"({left_out} left out: the emulator stalled {len(stalls)} times)"
        )
        steps = json.loads((run_dir / "summary.json").read_text())["steps"]
        assert [s["concurrency"] for s in steps] == [8] and all(s["valid"] for s in steps)
