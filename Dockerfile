# One image, several entry points (the console scripts of pyproject.toml):
#   latency-predictor (default, port 8001) | latency-trainer (8000) | latency-router (8080) | sim-pod | sim-replay
# Kubernetes sets `command:` per container (deploy/); `docker run IMAGE latency-trainer --port 8000 ...` locally.
# Build: docker build -t latency-router:0.1.0 .     (the tag follows [project] version in pyproject.toml)
# Checked offline by tests/deploy/test_dockerfile.py (no Docker engine needed).

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
# README.m[d]: copied when present (pyproject's readme), without failing the build when it is not.
COPY pyproject.toml README.m[d] ./
COPY shared ./shared
COPY trainer ./trainer
COPY predictor ./predictor
COPY router_client ./router_client
COPY sim ./sim
RUN /opt/venv/bin/pip install --no-compile . && /opt/venv/bin/python -m compileall -q /opt/venv/lib

FROM python:3.11.11-slim-bookworm
# MALLOC_ARENA_MAX=2: glibc gives every thread that allocates its own arena (up to 8 per core); the servers' thread
# pools then keep freed memory in many arenas. Measured on the trainer at the 100k-row window under 10,000
# samples/s: peak RSS 362 MB with the default, 282 MB with 2 (bench/results/trainer/RESULTS-trainer.md).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MALLOC_ARENA_MAX=2
RUN groupadd --system --gid 10001 latency \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin latency \
    && install -d -o 10001 -g 10001 /var/lib/latency-trainer /var/cache/latency-predictor
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
WORKDIR /var/lib/latency-trainer
EXPOSE 8000 8001 8080
# Probes /healthz on the port of whichever server runs: HEALTHCHECK_PORT, else PREDICT_PORT, else 8001 (the default
# CMD). Run other entry points with -e HEALTHCHECK_PORT=8000 (trainer) or 8080 (router). Kubernetes ignores this and
# uses the probes in deploy/.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('HEALTHCHECK_PORT') or os.environ.get('PREDICT_PORT') or '8001'; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2)"]
CMD ["latency-predictor", "--host", "0.0.0.0", "--port", "8001"]
