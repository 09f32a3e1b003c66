"""The simulated inference server: an OpenAI-compatible HTTP server with a calibrated step-time,
KV-cache, scheduler and power model. It never imports the rest of loadgen; loadgen talks to it over
HTTP only. Run it with ``python -m loadgen.sim --profile NAME --port 0 --port-file FILE``.
"""
