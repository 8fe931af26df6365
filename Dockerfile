# Countersign's image: web, worker, sweeper and migrations all run from it (see docker-compose.yml).
FROM python:3.13-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=control.settings_production \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, the locked versions checked against their hashes (requirements/app.txt,
# written by make lock), so a code change reuses this layer; then the server and the client
# package, which `manage.py demo_agent` (the scripted agent) drives the API with.
COPY requirements/app.txt ./requirements/
RUN pip install --require-hashes -r requirements/app.txt
COPY pyproject.toml README.md ./
COPY client ./client
RUN pip install --no-deps . ./client

COPY . .
# Collected under the production settings, so the hashed names, their gzipped copies and the
# manifest are the ones production serves. The settings refuse to load without strong secrets:
# throwaway ones live for this one command and are not kept in the image.
RUN DJANGO_ALLOWED_HOSTS=image-build \
    DJANGO_SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    COUNTERSIGN_CHECKPOINT_KEYS="build:$(python -c 'import secrets; print(secrets.token_urlsafe(32))')" \
    COUNTERSIGN_EVIDENCE_KEYS="build:$(python -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode())')" \
    python manage.py collectstatic --noinput --verbosity 0
RUN useradd --system --uid 10001 --home-dir /app countersign \
    && mkdir -p var \
    && chown countersign var
USER countersign

EXPOSE 8000
# Workers, threads and timeout from GUNICORN_WORKERS, GUNICORN_THREADS, GUNICORN_TIMEOUT.
CMD ["gunicorn", "--config", "python:control.gunicorn_config", "control.wsgi"]
