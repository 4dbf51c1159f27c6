"""Epochs: a database restored from a backup, marked with ``runstate restore-mark``,
starts a new timeline, and a client resuming from the old one gets a SNAPSHOT
instead of the new timeline's events under the seqs it expects. Real server
processes on a SQLite file, stopped and restored as an operator would."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.integration.test_api import create_task, start_session, step
from tests.support import Api, Server, Subscriber, create_token, runstate

PROGRESS = (
    "subscription($id: ID!, $after: Int, $epoch: String) {"
    " taskProgress(taskId: $id, afterSeq: $after, epoch: $epoch) { seq kind epoch } }"
)
ACTIVITY = (
    "subscription($id: ID!, $epoch: String) {"
    " sessionActivity(sessionId: $id, epoch: $epoch) { seq kind taskId epoch } }"
)
EPOCHS = "query($id: ID!) { task(id: $id) { ... on Task { events(first: 100) { seq epoch } } } }"


def epochs(api: Api, task_id: str) -> set[str]:
    return {e["epoch"] for e in api(EPOCHS, id=task_id)["task"]["events"]}


def walk(api: Api, task_id: str, indexes: range, version: int) -> int:
    """Start and complete the steps ``indexes`` (two events each); the version after."""
    for index in indexes:
        for name, kind in (("startStep", "StepRefInput"), ("completeStep", "CompleteStepInput")):
            answer = step(api, name, kind, taskId=task_id, stepIndex=index, expectedVersion=version)
            assert answer["__typename"] == "Task", answer
            version = answer["version"]
    return version


async def test_a_cursor_from_before_a_restore_gets_a_snapshot(tmp_path: Path) -> None:
    """Guards the epoch: after a restore and ``restore-mark``, afterSeq 8 with the old
    epoch answers a SNAPSHOT of the new timeline (seq 9), and sessionActivity with
    the old epoch starts with a SNAPSHOT of the task. Control: the same cursor
    without its epoch is answered with event 9 of the new timeline, as if it went
    on from the old event 8, which it does not."""
    database = tmp_path / "restored.db"
    url = f"sqlite://{database}"
    token = create_token(url, "ops")
    server = Server(url, tmp_path / "server.log").start()
    api = Api(server.url, token)
    session = start_session(api)["id"]
    task = create_task(api, session, steps=6)["id"]
    version = walk(api, task, range(2), 1)  # events 2-5
    (old,) = epochs(api, task)
    api.close()
    server.stop()
    backup = tmp_path / "backup.db"
    shutil.copy(database, backup)

    server.start()
    api = Api(server.url, token)
    walk(api, task, range(2, 3), version)  # events 6-7 of the first timeline
    api.close()
    server.stop()
    shutil.copy(backup, database)  # the restore: events 6-7 are gone
    for leftover in (Path(f"{database}-wal"), Path(f"{database}-shm")):
        leftover.unlink(missing_ok=True)
    marked = runstate("restore-mark", database_url=url)
    assert marked.stdout.startswith("new epoch ")

    server.start()
    api = Api(server.url, token)
    try:
        walk(api, task, range(2, 4), version)  # events 6-9 of the second timeline
        (new,) = epochs(api, task)
        assert new != old
        async with Subscriber(server.url, token, PROGRESS, {"id": task, "after": 7}) as plain:
            assert await plain.next() == {
                "taskProgress": {"seq": 8, "kind": "STEP_STARTED", "epoch": new}
            }
        resumed = {"id": task, "after": 7, "epoch": old}
        async with Subscriber(server.url, token, PROGRESS, resumed) as watch:
            assert await watch.next() == {
                "taskProgress": {"seq": 9, "kind": "SNAPSHOT", "epoch": new}
            }
        same = {"id": task, "after": 7, "epoch": new}
        async with Subscriber(server.url, token, PROGRESS, same) as watch:
            assert (await watch.next())["taskProgress"]["seq"] == 8, "the epoch it is: go on"
        async with Subscriber(server.url, token, ACTIVITY, {"id": session, "epoch": old}) as watch:
            assert await watch.next() == {
                "sessionActivity": {"seq": 9, "kind": "SNAPSHOT", "taskId": task, "epoch": new}
            }
    finally:
        api.close()
        server.stop()
