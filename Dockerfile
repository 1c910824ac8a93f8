# docsearch image: the same install path as the Makefile (scripts/install.sh).
#   CPU:  docker build -t docsearch .
#   CUDA: docker build -t docsearch:cuda --build-arg VARIANT=cuda .
# Run:   docker run --rm -v "$PWD/contracts:/docs:ro" -v docsearch-data:/data docsearch index /docs
# Serve: docker run --rm -v docsearch-data:/data docsearch keys create --collections docs
#        docker run --rm -p 7860:7860 -v docsearch-data:/data docsearch
#        (the default command serves the API on 0.0.0.0, which refuses to start without a key)
FROM python:3.11-slim-bookworm

# cpu: torch from the CPU wheel index; cuda: CUDA 12.8 wheels plus the flash-attn extra.
ARG VARIANT=cpu
ARG EXTRAS=ui,ocr,office,onnx

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DOCSEARCH_HOME=/data \
    HF_HOME=/data/huggingface

# OCR: the Tesseract engine, and the system libraries OpenCV (under RapidOCR) loads; antiword
# reads legacy Word .doc files.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr libgl1 libglib2.0-0 antiword \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/docsearch
COPY pyproject.toml README.md CHANGELOG.md ./
COPY scripts/install.sh scripts/install.sh
COPY docsearch docsearch

RUN if [ "$VARIANT" = "cuda" ]; then \
        export TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 EXTRAS="$EXTRAS,gpu"; \
    else \
        export TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu; \
    fi \
    && PYTHON=python VENV=none EDITABLE=0 scripts/install.sh \
    && useradd --create-home --uid 10001 docsearch \
    && mkdir -p /data \
    && chown docsearch /data

USER 10001
VOLUME ["/data"]
EXPOSE 7860
ENTRYPOINT ["docsearch"]
CMD ["serve", "--host", "0.0.0.0", "--port", "7860"]
