"""IntentusNet's own record files load, verify and replay as they are; a real change still fails.

The fixtures in `tests/fixtures/intentusnet/` are IntentusNet's files, byte for byte, from
https://github.com/Balchandar/intentusnet (MIT), path
`examples/execution_replay_example/records/`, commits `3b0fa3c654268bab922da678846323b72b86ad21`
(295d3c68..., 3ec2d210...) and `f8c6a661c644b7409ec3294afe44ccd66d18fe02` (49fb0b12...); their
README names the source and the license. Their `envelopeHash` has no `sha256:` prefix and is
the SHA-256 of the whole envelope; their `finalResponse.status` is `"ok"`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from langgraph_replay_guard import (
    ExecutionRecord,
    NotReplayableError,
    ReplayEngine,
    ReplayHashMismatchError,
    compute_envelope_hash,
    verify_record_integrity,
)
from langgraph_replay_guard.records import (
    RESPONSE_STATUSES,
    EnvelopeHashFormatError,
    FinalResponse,
    RecordFileError,
    RecordFiles,
    envelope_hash_digest,
    envelope_hash_matches,
    invalidate_record,
    read_record_file,
)
from tests.unit.test_records_contract_shape import contract_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "intentusnet"
FILES = sorted(FIXTURES.glob("*.json"))
COORDINATOR = FIXTURES / "295d3c68-b09c-4bd7-bde3-453321ca54e7.json"


def raw(path: Path = COORDINATOR) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def intentusnet_stable_hash(value: Any) -> str:
    """IntentusNet's `stable_hash` (src/intentusnet/recording/models.py), on plain JSON data."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_the_fixtures_are_intentusnets_three_files() -> None:
    assert [p.stem for p in FILES] == [
        "295d3c68-b09c-4bd7-bde3-453321ca54e7",
        "3ec2d210-7a8d-4442-88c3-2e40ee27c55a",
        "49fb0b12-73dc-4c24-8957-a8c57d28629d",
    ]
    for path in FILES:
        data = raw(path)
        assert data["header"]["envelopeHash"] == intentusnet_stable_hash(data["envelope"])
        assert not data["header"]["envelopeHash"].startswith("sha256:")
        assert data["finalResponse"]["status"] == "ok"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem[:8])
def test_intentusnet_files_load_verify_and_replay_as_they_are(path: Path) -> None:
    data = raw(path)
    record = read_record_file(path)
    assert record.execution_id == path.stem
    assert record.to_json_data() == data  # nothing rewritten: "ok" stays "ok", no new fields
    assert record.model_dump(mode="json") == data
    assert record.finalResponse is not None
    assert record.finalResponse.status == "ok"
    assert record.finalResponse.outcome == "success"
    assert not record.finalResponse.failed

    report = verify_record_integrity(record)
    assert report.ok, report.problems
    assert report.warnings == ()
    assert bool(verify_record_integrity(data))  # the raw JSON data too

    engine = ReplayEngine(record)
    assert engine.is_replayable() == (True, None)
    result = engine.replay()
    assert result.payload == data["finalResponse"]["payload"]
    assert result.metadata == data["finalResponse"]["metadata"]
    assert result.response == data["finalResponse"]
    assert result.originalExecutionId == path.stem
    # The request that was recorded matches, as IntentusNet's own replay checks it.
    assert engine.replay(copy.deepcopy(data["envelope"])).payload == result.payload


def test_an_invalidated_intentusnet_record_writes_its_reason() -> None:
    header = invalidate_record(read_record_file(COORDINATOR)).to_json_data()["header"]
    assert header["replayable"] is False
    assert header["replayableReason"] == "manually_invalidated"


def test_a_changed_envelope_still_fails_verification_and_replay() -> None:
    data = raw()
    data["envelope"]["payload"]["text"] = "Payment failed with error 500"
    report = verify_record_integrity(data)
    assert not report.ok
    recorded = data["header"]["envelopeHash"]
    actual = intentusnet_stable_hash(data["envelope"])
    assert report.problems == (
        f"the envelope hashes to {actual}, not to the recorded {recorded} "
        "(the envelope was changed)",
    )
    engine = ReplayEngine(ExecutionRecord.model_validate(data))
    assert engine.is_replayable() == (False, "record_corrupted")
    with pytest.raises(NotReplayableError, match="record_corrupted") as refused:
        engine.replay()
    assert refused.value.reason == "record_corrupted"


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("metadata", "traceId"), "00000000-0000-0000-0000-000000000000"),  # IntentusNet hashes it
        (("intent", "name"), "support.ticket.refund"),
        (("routing", "targetAgent"), "human-fallback-agent"),
        (("version",), "2.0"),
    ],
)
def test_every_envelope_field_of_an_intentusnet_record_is_covered(
    where: tuple[str, ...], value: str
) -> None:
    data = raw()
    target = data["envelope"]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    assert not verify_record_integrity(data).ok


def test_a_changed_hash_fails_verification() -> None:
    data = raw()
    digest = data["header"]["envelopeHash"]
    data["header"]["envelopeHash"] = ("0" if digest[0] != "0" else "1") + digest[1:]
    problems = verify_record_integrity(data).problems
    assert len(problems) == 1
    assert "(the envelope was changed)" in problems[0]


def test_replaying_another_request_is_refused_with_both_hashes() -> None:
    data = raw()
    engine = ReplayEngine(read_record_file(COORDINATOR))
    other = copy.deepcopy(data["envelope"])
    other["payload"]["text"] = "I forgot my password"
    with pytest.raises(ReplayHashMismatchError) as mismatch:
        engine.replay(other)
    assert mismatch.value.expected == data["header"]["envelopeHash"]
    assert mismatch.value.actual == intentusnet_stable_hash(other)  # written the record's way


def test_the_sha256_prefix_is_optional_and_checked_when_present() -> None:
    data = raw()
    digest = data["header"]["envelopeHash"]
    data["header"]["envelopeHash"] = f"sha256:{digest}"
    assert verify_record_integrity(data).ok
    assert envelope_hash_digest(f"sha256:{digest}") == envelope_hash_digest(digest) == digest

    for algorithm in ("md5", "sha512", "SHA256"):
        data["header"]["envelopeHash"] = f"{algorithm}:{digest}"
        (problem,) = verify_record_integrity(data).problems
        assert problem == (
            f"envelopeHash '{algorithm}:{digest}' names the unknown hash algorithm "
            f"'{algorithm}'; accepted: a 'sha256:' prefix, or none (a bare SHA-256 hex digest)"
        )
        engine = ReplayEngine(ExecutionRecord.model_validate(data))
        assert engine.is_replayable() == (False, "record_corrupted")
        # Forced, the request check still cannot pass: the error says why.
        with pytest.raises(ReplayHashMismatchError, match="unknown hash algorithm"):
            engine.replay(data["envelope"], force=True)


@pytest.mark.parametrize("bad", ["", "sha256:", "sha256:xyz", "abc123", "sha256:" + "A" * 64])
def test_a_malformed_hash_is_a_clear_problem(bad: str) -> None:
    with pytest.raises(EnvelopeHashFormatError, match="is not a SHA-256 digest") as caught:
        envelope_hash_digest(bad)
    assert caught.value.value == bad
    data = raw()
    data["header"]["envelopeHash"] = bad
    (problem,) = verify_record_integrity(data).problems
    assert "is not a SHA-256 digest: 64 lowercase hex digits" in problem


def test_this_packages_records_verify_with_or_without_the_prefix() -> None:
    data = contract_record()
    prefixed = data["header"]["envelopeHash"]
    assert prefixed == compute_envelope_hash(data["envelope"])
    assert verify_record_integrity(data).ok
    data["header"]["envelopeHash"] = prefixed.removeprefix("sha256:")
    assert verify_record_integrity(data).ok
    data["envelope"]["payload"]["ticket"] = "T-18"
    assert not verify_record_integrity(data).ok
    # Routing fields stay out of this package's hash, prefixed or not.
    envelope = {"graph": "agent", "input": {"q": 1}, "config": {"run_id": "r1"}}
    bare = compute_envelope_hash(envelope).removeprefix("sha256:")
    assert envelope_hash_matches({**envelope, "config": {"run_id": "r2"}}, bare)
    assert not envelope_hash_matches({**envelope, "input": {"q": 2}}, bare)


def test_statuses_map_to_outcomes() -> None:
    assert dict(RESPONSE_STATUSES) == {"success": "success", "ok": "success", "error": "error"}
    assert FinalResponse.model_validate({"status": "ok", "payload": 1}).outcome == "success"
    assert FinalResponse.model_validate({"status": "success"}).outcome == "success"
    failed = FinalResponse.model_validate(
        {"status": "error", "error": {"code": "routing_error", "message": "no agent"}}
    )
    assert failed.outcome == "error"
    assert failed.failed
    assert FinalResponse.model_validate({"payload": 1}).outcome is None


@pytest.mark.parametrize("status", ["done", "OK", "failed", "", 1])
def test_an_unknown_status_is_a_clear_error_naming_the_accepted_ones(status: object) -> None:
    data = raw()
    data["finalResponse"]["status"] = status
    with pytest.raises(ValidationError) as caught:
        ExecutionRecord.model_validate(data)
    message = str(caught.value)
    assert f"unknown finalResponse.status {status!r}" in message
    assert "accepted: 'success' (success), 'ok' (success), 'error' (error)" in message
    report = verify_record_integrity(data)
    assert not report.ok
    assert (
        f"finalResponse.status: Value error, unknown finalResponse.status {status!r}"
        in (report.problems[0])
    )


def test_an_ok_status_with_an_error_is_inconsistent() -> None:
    data = raw()
    data["finalResponse"]["error"] = {"code": "agent_error", "message": "boom"}
    problems = verify_record_integrity(data).problems
    assert problems == ("finalResponse.status is 'ok' but it has an error (agent_error)",)


def test_record_files_read_by_id_from_a_directory_or_files(tmp_path: Path) -> None:
    files = RecordFiles([FIXTURES])
    assert files.paths == FILES
    record = files.get("49fb0b12-73dc-4c24-8957-a8c57d28629d")
    assert record is not None
    assert record.envelope["intent"]["name"] == "support.ticket.payment"
    assert files.get("no-such-id") is None
    assert [type(entry).__name__ for _, entry in files.entries()] == ["ExecutionRecord"] * 3

    # A record found by its executionId in a file named otherwise; a single file needs no id.
    renamed = tmp_path / "latest.json"
    renamed.write_text(COORDINATOR.read_text(encoding="utf-8"), encoding="utf-8")
    single = RecordFiles([renamed, renamed])
    assert single.paths == [renamed]
    assert single.pick(None).execution_id == COORDINATOR.stem
    assert single.pick(COORDINATOR.stem).execution_id == COORDINATOR.stem
    with pytest.raises(RecordFileError, match="3 record files"):
        files.pick(None)
    with pytest.raises(RecordFileError, match="no record file or directory"):
        RecordFiles([tmp_path / "missing.json"])


def test_broken_record_files_say_which_file_and_why(tmp_path: Path) -> None:
    not_json = tmp_path / "a.json"
    not_json.write_text("{nope", encoding="utf-8")
    unknown = tmp_path / "b.json"
    data = raw()
    data["finalResponse"]["status"] = "done"
    unknown.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"a\.json' is not JSON"):
        read_record_file(not_json)
    with pytest.raises(RecordFileError) as caught:
        read_record_file(unknown)
    assert "b.json' is not a valid execution record: finalResponse.status" in str(caught.value)
    assert "unknown finalResponse.status 'done'" in str(caught.value)
    entries = RecordFiles([tmp_path]).entries()
    assert [(p.name, type(e).__name__) for p, e in entries] == [
        ("a.json", "RecordFileError"),
        ("b.json", "RecordFileError"),
    ]
    # A file named after the id that does not load is an error, not "no such record".
    named = tmp_path / "named"
    named.mkdir()
    (named / f"{COORDINATOR.stem}.json").write_text("[]", encoding="utf-8")
    with pytest.raises(RecordFileError):
        RecordFiles([named]).get(COORDINATOR.stem)
