# runstate's server in a container. Alone, on SQLite in the volume /data:
#   docker build -t runstate . && docker run -p 127.0.0.1:8000:8000 runstate
# Beside PostgreSQL and Redis: docker compose up -d --build --wait (compose.yaml).
# Python's minor version is the one constraints.txt was made with (its third line).
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The project as pip installs it from the repository: its metadata (README.md is
# its long description), its source, and constraints.txt, which pins every package
# it installs (scripts/constraints.sh); the copy goes once installed. The pins come
# as PIP_CONSTRAINT, not --constraint: pip's build environment (setuptools, to
# build runstate) reads the variable too.
COPY pyproject.toml README.md constraints.txt /build/
COPY src /build/src
RUN PIP_CONSTRAINT=/build/constraints.txt pip install /build && rm -rf /build

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
# token link USER` makes a signed-in link to the dashboard of the server a running
# container serves (on its database: the variable above, and /data its folder).
EXPOSE 8000
ENTRYPOINT ["runstate"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
