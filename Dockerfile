# Countersign's image: web, worker, sweeper and migrations all run from it (see docker-compose.yml).
FROM python:3.13-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, from pyproject.toml alone, so a code change reuses this layer.
COPY pyproject.toml README.md ./
RUN pip install .

COPY . .
RUN useradd --system --uid 10001 --home-dir /app countersign \
    && mkdir -p var \
    && chown countersign var
USER countersign

EXPOSE 8000
CMD ["python", "manage.py", "runserver", "0.0.0.0:8000", "--noreload"]
