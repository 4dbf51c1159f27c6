# runstate's server in a container. Alone, on SQLite in the volume /data:
#   docker build -t runstate . && docker run -p 127.0.0.1:8000:8000 runstate
# Beside PostgreSQL and Redis: docker compose up -d --build --wait (compose.yaml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The project as pip installs it from the repository: its metadata (README.md is
# its long description) and its source; the copy goes once installed.
COPY pyproject.toml README.md /build/
COPY src /build/src
RUN pip install /build && rm -rf /build

# A user of its own, not root, owning /data: the volume where the default SQLite
# database lives (RUNSTATE_DATABASE_URL chooses another, as compose.yaml does).
RUN useradd --create-home --uid 10001 runstate && mkdir /data && chown runstate /data
USER runstate
WORKDIR /data
VOLUME /data
ENV RUNSTATE_DATABASE_URL=sqlite:///data/runstate.db

# `runstate serve` applies pending migrations itself (under a lock, so processes may
# start together) and reads RUNSTATE_DATABASE_URL, RUNSTATE_REDIS_URL and every
# other setting from the environment. Exec form: SIGTERM reaches it and it stops
# gracefully. The entry point is the `runstate` command, so `docker run --rm IMAGE
# export-schema` runs another of its commands; `docker exec CONTAINER runstate
# token create USER` makes a token in the database a running container serves.
EXPOSE 8000
ENTRYPOINT ["runstate"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
