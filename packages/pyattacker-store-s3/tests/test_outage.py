"""The object store going away mid-run: a clear error, nothing lost, writing again once it is back."""

from __future__ import annotations

from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

from pyattacker.errors import StoreUnavailable
from pyattacker.store.location import open_store
from pyattacker.testing.rows import attempt, batch_of, commit, pipeline

from .conftest import BUCKET, _free_port


def test_a_commit_while_the_server_is_down_fails_clearly_and_resumes_after(tmp_path: Path) -> None:
    # a second endpoint on the same (in-process) S3 state, one the test can stop and start again
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    location = f"s3://{BUCKET}/outage-{tmp_path.name}/run?endpoint_url=http://127.0.0.1:{port}"
    writer = open_store(location)
    try:
        commit(writer, pipelines=[pipeline("p1")], attempts=[attempt("p1")])
        server.stop()
        lost = batch_of(pipelines=[pipeline("p2")], attempts=[attempt("p2")])
        with pytest.raises(StoreUnavailable, match="did not acknowledge") as caught:
            writer.commit(lost)
        assert caught.value.__cause__ is not None and "127.0.0.1" in str(caught.value)
        assert lost.attempts[0].attempt_id is None  # handed back unnumbered: it may be committed again
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        writer.commit(lost)
        assert lost.attempts[0].attempt_id == 2
    finally:
        writer.close()
        server.stop()
    reader = open_store(f"s3://{BUCKET}/outage-{tmp_path.name}/run", read_only=True)  # the session's endpoint
    assert set(reader.lookup_pipelines(["p1", "p2"])) == {"p1", "p2"}
    assert [a.attempt_id for a in reader.page("attempts")] == [1, 2]


def test_a_put_whose_answer_is_lost_is_acknowledged_not_stored_twice(tmp_path: Path) -> None:
    """The PUT reaches S3 but its answer does not reach the writer (a connection cut after the
    request): the store asks S3 before reporting a failure, so the commit succeeds once and the
    batch is neither handed back (to be committed again) nor stored twice."""
    store = open_store(f"s3://{BUCKET}/lost-answer-{tmp_path.name}/run")
    cut = {"left": 1}

    def lose_the_answer(**kwargs: object) -> None:
        if cut["left"]:
            cut["left"] -= 1
            raise ConnectionError("connection reset after the request was sent")

    try:
        commit(store, pipelines=[pipeline("p1")], attempts=[attempt("p1")])
        store.client.meta.events.register("after-call.s3.PutObject", lose_the_answer)  # type: ignore[attr-defined]
        answered = batch_of(pipelines=[pipeline("p2")], attempts=[attempt("p2")])
        store.commit(answered)  # no exception: S3 has the segment
        assert cut["left"] == 0, "the answer was never cut: the test proves nothing"
        assert answered.attempts[0].attempt_id == 2
        commit(store, pipelines=[pipeline("p3")], attempts=[attempt("p3")])
    finally:
        store.close()
    reader = open_store(f"s3://{BUCKET}/lost-answer-{tmp_path.name}/run", read_only=True)
    assert [a.pipeline_id for a in reader.page("attempts")] == ["p1", "p2", "p3"]
    assert [a.attempt_id for a in reader.page("attempts")] == [1, 2, 3]
