# llm-loadgen: one image for the simulated server, the Locust master and workers, and the monitor.
#   docker build -t llm-loadgen .
#   docker compose up --scale worker=4        (see docker-compose.yml)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY loadgen ./loadgen
COPY scenarios ./scenarios
RUN pip install . && useradd --create-home --uid 1000 loadgen && mkdir -p /reports && chown loadgen /reports
USER loadgen

# 8089: Locust web UI; 5557: Locust master <-> workers; 30000: simulated server; 9500: monitor
EXPOSE 8089 5557 30000 9500
ENTRYPOINT []
CMD ["loadgen", "--help"]
