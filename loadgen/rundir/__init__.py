"""The run directory, the single source of truth: creating it and its manifest (``layout``), the
records appended to it (``records``) and the one wall-clock anchor per process (``clock``). What is
rendered from it lives downstream (``loadgen.report.pipeline``)."""
