"""`replay-guard records verify/show/replay --file` on IntentusNet's own record files.

The files in `tests/fixtures/intentusnet/` are IntentusNet's, byte for byte, from
https://github.com/Balchandar/intentusnet (MIT), `examples/execution_replay_example/records/`
(commits and license in that folder's README).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.integration.test_records_cli import cli
from tests.unit.test_records_contract_shape import contract_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "intentusnet"
COORDINATOR = "295d3c68-b09c-4bd7-bde3-453321ca54e7"
CLASSIFY = "3ec2d210-7a8d-4442-88c3-2e40ee27c55a"
PAYMENT = "49fb0b12-73dc-4c24-8957-a8c57d28629d"


def fixture(execution_id: str) -> Path:
    return FIXTURES / f"{execution_id}.json"


def test_verify_reads_intentusnets_records_folder_and_files() -> None:
    folder = cli("verify", "--file", str(FIXTURES))
    assert folder.returncode == 0, folder.stdout + folder.stderr
    for execution_id in (COORDINATOR, CLASSIFY, PAYMENT):
        assert f"ok        {execution_id} ({fixture(execution_id)})" in folder.stdout
    assert "3 ok, 0 corrupted" in folder.stdout

    two = cli("verify", "--file", str(fixture(CLASSIFY)), "--file", str(fixture(PAYMENT)))
    assert two.returncode == 0, two.stdout + two.stderr
    assert "2 ok, 0 corrupted" in two.stdout

    report = json.loads(cli("verify", PAYMENT, "--file", str(FIXTURES), "--json").stdout)
    assert report == [
        {
            "executionId": PAYMENT,
            "file": str(fixture(PAYMENT)),
            "ok": True,
            "replayable": True,
            "reason": None,
            "problems": [],
            "warnings": [],
        }
    ]


def test_show_and_replay_serve_the_recorded_response(tmp_path: Path) -> None:
    data = json.loads(fixture(COORDINATOR).read_text(encoding="utf-8"))
    shown = cli("show", "--file", str(fixture(COORDINATOR)))
    assert shown.returncode == 0, shown.stderr
    assert f"envelope hash:  {data['header']['envelopeHash']}" in shown.stdout
    assert "status:         replayable" in shown.stdout
    assert "     3  AGENT_ATTEMPT_END" in shown.stdout
    as_json = json.loads(cli("show", COORDINATOR, "--file", str(FIXTURES), "--json").stdout)
    assert as_json == {**data, "problems": []}  # the file as it is: "ok", no prefix

    replayed = cli("replay", COORDINATOR, "--file", str(FIXTURES))
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == data["finalResponse"]["payload"]
    result = json.loads(cli("replay", "--file", str(fixture(COORDINATOR)), "--json").stdout)
    assert result["fromReplay"] is True
    assert result["originalExecutionId"] == COORDINATOR

    envelope = tmp_path / "envelope.json"
    envelope.write_text(json.dumps(data["envelope"]), encoding="utf-8")
    same = cli("replay", "--file", str(fixture(COORDINATOR)), "--envelope", str(envelope))
    assert same.returncode == 0, same.stderr
    data["envelope"]["payload"]["text"] = "I forgot my password"
    envelope.write_text(json.dumps(data["envelope"]), encoding="utf-8")
    other = cli("replay", "--file", str(fixture(COORDINATOR)), "--envelope", str(envelope))
    assert other.returncode == 1
    assert "does not match execution record" in other.stderr


def test_a_tampered_file_is_corrupted_and_not_replayed(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    shutil.copytree(FIXTURES, folder)
    tampered = folder / f"{PAYMENT}.json"
    data = json.loads(tampered.read_text(encoding="utf-8"))
    data["envelope"]["payload"]["text"] = "Payment failed with error 500"
    tampered.write_text(json.dumps(data, indent=2), encoding="utf-8")

    verified = cli("verify", "--file", str(folder))
    assert verified.returncode == 1
    assert f"CORRUPTED {PAYMENT} ({tampered}): the envelope hashes to " in verified.stdout
    assert f"not to the recorded {data['header']['envelopeHash']}" in verified.stdout
    assert "2 ok, 1 corrupted" in verified.stdout

    refused = cli("replay", PAYMENT, "--file", str(folder))
    assert refused.returncode == 1
    assert "is not replayable (record_corrupted)" in refused.stderr
    forced = cli("replay", PAYMENT, "--file", str(folder), "--force")
    assert forced.returncode == 0
    assert "warning: forced replay of a non-replayable record" in forced.stderr


def test_unknown_status_and_algorithm_are_named(tmp_path: Path) -> None:
    data = json.loads(fixture(CLASSIFY).read_text(encoding="utf-8"))
    unknown = tmp_path / "unknown-status.json"
    unknown.write_text(
        json.dumps({**data, "finalResponse": {**data["finalResponse"], "status": "done"}}),
        encoding="utf-8",
    )
    verified = cli("verify", "--file", str(unknown))
    assert verified.returncode == 1
    assert "CORRUPTED unknown-status" in verified.stdout
    assert "unknown finalResponse.status 'done'; accepted: 'success' (success), 'ok'" in (
        verified.stdout
    )
    shown = cli("show", "--file", str(unknown))
    assert shown.returncode == 2
    assert "is not a valid execution record: finalResponse.status" in shown.stderr

    md5 = tmp_path / "md5.json"
    header = {**data["header"], "envelopeHash": f"md5:{data['header']['envelopeHash']}"}
    md5.write_text(json.dumps({**data, "header": header}), encoding="utf-8")
    verified = cli("verify", "--file", str(md5))
    assert verified.returncode == 1
    assert "names the unknown hash algorithm 'md5'; accepted: a 'sha256:' prefix" in (
        verified.stdout
    )


def test_this_packages_records_as_files_and_usage_errors(tmp_path: Path) -> None:
    record = tmp_path / "contract.json"
    record.write_text(json.dumps(contract_record()), encoding="utf-8")
    verified = cli("verify", "--file", str(record), "--file", str(FIXTURES))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "4 ok, 0 corrupted" in verified.stdout

    several = cli("replay", "--file", str(FIXTURES))
    assert several.returncode == 2
    assert "3 record files" in several.stderr
    missing = cli("show", "no-such-id", "--file", str(FIXTURES))
    assert missing.returncode == 2
    assert "No execution record 'no-such-id'" in missing.stderr
    nowhere = cli("verify", "--file", str(tmp_path / "nowhere"))
    assert nowhere.returncode == 2
    assert "no record file or directory" in nowhere.stderr
    both = cli("verify", "--db", str(tmp_path / "r.db"), "--file", str(record))
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
    no_id = cli("show", "--db", str(tmp_path / "r.db"))
    assert no_id.returncode == 2
    assert "give the record's ID" in no_id.stderr
