"""The run: the orchestrator above the load side, the analysis and the report.

``run.ramp`` walks a ramp's steps (or searches for the knee) with the load side's users and shape,
starts and stops the telemetry side process, the load generator's own Prometheus exporter and the
server's log capture, judges ``--abort-on`` and the knee search from the summary the analysis
builds as steps end, and writes the report when the ramp is over (or cut short). It is the only
part that reaches all of them; nothing below it imports it."""
