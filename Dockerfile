# syntax=docker/dockerfile:1
#
# One image for every tikk process: the container's arguments are a `tikk` command line
# (`server ...`, `dispatcher ...`, `worker MODULE:ATTR ...`, `migrate ...`, `auth ...`).
# Built from the checkout's root:
#
#   docker build -t tikk:local .
#
# The first stage builds tikk's wheel and installs it with the production backends' drivers
# into a virtual environment; the second copies only that environment onto a clean slim base,
# so no compiler, pip cache or source tree ships.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
# The extras of the production stack (pyproject.toml): Cassandra, Kafka and ZooKeeper drivers,
# and OpenTelemetry for --otel otlp.
ARG TIKK_EXTRAS=cassandra,kafka,zookeeper,otel
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# Only what the wheel is made of: the packages pyproject.toml installs, and its readme.
COPY pyproject.toml README.md ./
COPY tikk ./tikk
COPY server ./server
COPY dispatcher ./dispatcher
COPY worker_sdk ./worker_sdk
COPY history ./history
# /opt/tikk/app holds the workers' modules (`tikk worker MODULE:ATTR`): a .pth file puts it on
# the path after the installed packages, so a module of a worker never shadows one of tikk's.
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/tikk/venv \
 && /opt/tikk/venv/bin/pip install "$(ls /wheels/tikk-*.whl)[${TIKK_EXTRAS}]" \
 && site=$(/opt/tikk/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
 && echo /opt/tikk/app > "$site/tikk-app.pth"

FROM ${PYTHON_IMAGE} AS runtime
# A fixed, unprivileged uid: Kubernetes' runAsUser, volume ownership and file modes on the
# host can name it.
ARG TIKK_UID=10001
RUN groupadd --system --gid "${TIKK_UID}" tikk \
 && useradd --system --uid "${TIKK_UID}" --gid tikk --home-dir /var/lib/tikk \
      --no-create-home --shell /usr/sbin/nologin tikk \
 && install -d -o tikk -g tikk -m 0700 /var/lib/tikk
COPY --from=build /opt/tikk/venv /opt/tikk/venv
# The demo worker (`tikk worker examples.demo_worker:worker`), which the compose stack and the
# chart run by default. An image of your own workers (FROM this one) adds its modules beside it.
COPY examples/__init__.py examples/demo_worker.py /opt/tikk/app/examples/
# PYTHONDONTWRITEBYTECODE: the root filesystem may be read-only (the chart mounts it so).
# TIKK_HEALTH_URL is what HEALTHCHECK asks: a server's --http, or the --metrics of a
# dispatcher or worker (https:// where the server serves TLS).
ENV PATH=/opt/tikk/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TIKK_HEALTH_URL=http://127.0.0.1:7071/healthz
WORKDIR /var/lib/tikk
USER 10001:10001
# 7070: the gRPC API. 7071: HTTP, /healthz and /metrics (the server's --http, also the web
# console; a dispatcher's or worker's --metrics).
EXPOSE 7070 7071
# The slim base has no curl: ask with the standard library. The probe asks its own process on
# loopback, whose certificate names the service rather than 127.0.0.1, so it checks that the
# listener answers, not who it is.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, ssl, urllib.request; c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE; urllib.request.urlopen(os.environ['TIKK_HEALTH_URL'], timeout=4, context=c)"]
ENTRYPOINT ["tikk"]
# A server on every interface must serve TLS and check callers (or be told --insecure): mount
# its certificate and key at these paths, or give a command line of your own.
CMD ["server", "--listen", "0.0.0.0:7070", "--http", "0.0.0.0:7071", "--auth", \
     "--tls-cert", "/etc/tikk/tls/tls.crt", "--tls-key", "/etc/tikk/tls/tls.key", \
     "--data-dir", "/var/lib/tikk"]
