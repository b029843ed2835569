# syntax=docker/dockerfile:1
# One image for all three cdctl components; the entry point is `cdctl`, the pod spec picks the command:
#   cdctl controller        (Deployment, runs as the image's non-root user)
#   cdctl kubelet-plugin    (DaemonSet; its pod spec runs it as root: kubelet host paths are root-owned)
#   cdctl daemon run|check  (per-ComputeDomain DaemonSet the controller creates; run as root: it supervises
#                            nvidia-imex and writes the pod's /etc/hosts)
# Build (the chart's default image is ghcr.io/cdctl/cdctl:<appVersion>):
#   docker build -t ghcr.io/cdctl/cdctl:0.1.0 .

# Pinned by full version; bump deliberately.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# --- build: cdctl and its dependencies (binary wheels) into a self-contained virtual environment -------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/cdctl
WORKDIR /src
COPY pyproject.toml README.md ./
COPY migrations ./migrations
COPY charts/cdctl/Chart.yaml charts/cdctl/values.yaml charts/cdctl/values.schema.json ./charts/cdctl/
COPY charts/cdctl/crds ./charts/cdctl/crds
COPY charts/cdctl/files ./charts/cdctl/files
COPY cdctl ./cdctl
# [fast] adds uvloop. Every dependency ships binary wheels, so the slim base needs no compiler.
RUN /opt/cdctl/bin/pip install '.[fast]' \
 && /opt/cdctl/bin/cdctl --version

# --- runtime: the virtual environment on the same base, a non-root default user ------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="cdctl" \
      org.opencontainers.image.description="Control plane for NVIDIA IMEX ComputeDomains on Kubernetes (controller, kubelet plugin, IMEX daemon)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 65532 cdctl \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/cdctl --no-create-home \
      --shell /usr/sbin/nologin cdctl \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/cdctl
COPY --from=build /opt/cdctl /opt/cdctl
ENV PATH=/opt/cdctl/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /var/lib/cdctl
USER 65532:65532
ENTRYPOINT ["cdctl"]
CMD ["--help"]
