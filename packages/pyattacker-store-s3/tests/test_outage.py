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
