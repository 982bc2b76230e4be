# The dashboard and one worker, on the embedded default (SQLite store in the data home).
# Build: docker build -t dplab .   Run: docker run -p 8501:8501 -v dplab-data:/data dplab
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DPLAB_HOME=/data \
    DPLAB_ADDRESS=0.0.0.0 \
    DPLAB_PORT=8501

WORKDIR /srv/dplab
# The same idempotent setup script as `make run`: the dependency layer is rebuilt only when
# requirements.txt changes, and at start-up the script finds everything installed.
COPY requirements.txt requirements-bench.txt ./
COPY scripts/setup.sh scripts/
RUN bash scripts/setup.sh requirements.txt

COPY . .
RUN useradd --create-home --uid 10001 dplab \
    && mkdir -p /data \
    && chown dplab /data

USER 10001
VOLUME ["/data"]
EXPOSE 8501
CMD ["bash", "scripts/run.sh"]
