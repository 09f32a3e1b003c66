"""Locust web UI extension: the "LLM" tab, its live JSON, the run's reports, ``loadgen ui``.

``live`` reads a run directory as it grows (no Flask, no Locust): ``tail`` follows its JSONL files,
``livetelemetry`` its samples and events, ``livejson`` is the payload's shape; ``blueprint`` serves it
on Locust's Flask app; ``cli`` launches Locust with our locustfile.
"""
