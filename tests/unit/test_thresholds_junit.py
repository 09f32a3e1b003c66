"""--junit: the thresholds' results as JUnit XML, valid against the common JUnit schema."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from loadgen.analysis.thresholds import judge
from loadgen.report.junit import junit_xml
from tests.unit.test_thresholds import RUN

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "junit-10.xsd"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


def test_the_shipped_schema_rejects_malformed_files(schema: xmlschema.XMLSchema) -> None:
    ok = (
        '<testsuites><testsuite name="a" tests="1" failures="0" errors="0">'
        '<testcase name="x"/></testsuite></testsuites>'
    )
    assert schema.is_valid(ok)
    assert not schema.is_valid(ok.replace(' errors="0"', ""))  # a required attribute missing
    assert not schema.is_valid(ok.replace('<testcase name="x"/>', "<testcase/>"))  # a testcase without a name
    assert not schema.is_valid(ok.replace('<testcase name="x"/>', '<testcase name="x"><oops/></testcase>'))
    assert not schema.is_valid(ok.replace('errors="0"', 'errors="0" time="fast"'))  # time is seconds
    assert not schema.is_valid("<testsuite/>")


def test_one_testcase_per_step_and_threshold_failures_say_by_how_much(schema: xmlschema.XMLSchema) -> None:
    summary = dict(RUN)
    summary["thresholds"] = judge(RUN, "ttft_p99>2s,run:error_rate>1%,goodput_share<90%", "error_rate>50%", [])
    data = junit_xml(summary)
    schema.validate(data.decode())
    root = ET.fromstring(data)
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "loadgen ramp: gate test"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    # 4 steps x 2 step thresholds, 1 run threshold, 1 skipped goodput threshold
    assert len(cases) == 10
    counts = (suite.get("tests"), suite.get("failures"), suite.get("skipped"), suite.get("errors"))
    assert counts == ("10", "2", "3", "0")
    failure = cases["step 2 (C=64): ttft_p99>2s"].find("failure")
    assert failure is not None and failure.get("message") == "ttft_p99 2,431 ms > 2,000 ms (+21.6%) at C=64"
    assert failure.get("type") == "--fail-on"
    assert cases["step 0 (C=1): ttft_p99>2s"].find("failure") is None
    invalid = cases["step 3 (C=128): ttft_p99>2s"].find("skipped")
    assert invalid is not None and "invalid: too few requests" in str(invalid.get("message"))
    run_case = cases["run:error_rate>1%"].find("failure")
    assert run_case is not None and run_case.get("message", "").startswith("error_rate 1.97% > 1.00%")
    assert cases["goodput_share<90%"].find("skipped") is not None
    assert cases["step 2 (C=64): error_rate>50%"].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "fail" and props["run_id"] == "r1"


def test_a_run_without_thresholds_is_an_empty_valid_suite(schema: xmlschema.XMLSchema) -> None:
    data = junit_xml(RUN)
    schema.validate(data.decode())
    assert ET.fromstring(data).find("testsuite").get("tests") == "0"  # type: ignore[union-attr]
