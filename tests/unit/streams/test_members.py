"""A dead worker's group members: what it reported, and which of them its supervisor removes."""
import json

from slipstream.streams.members import departed, read_members, write_members


def test_departed_removes_the_dead_workers_members_only():
    dead = {"g-detect": "m-1", "g-other": "m-9"}
    alive = [{"g-detect": "m-2"}, {"g-other": "m-8"}]
    assert departed(dead, alive) == {"g-detect": ("m-1",), "g-other": ("m-9",)}


def test_departed_never_removes_a_member_a_live_worker_reports():
    # a stale or copied file naming a live member: removing it would rebalance the group for nothing
    assert departed({"g": "m-2"}, [{"g": "m-2"}]) == {}
    assert departed({"g": "m-2"}, [{"other": "m-2"}]) == {"g": ("m-2",)}  # ids are per group


def test_departed_skips_a_worker_that_never_joined():
    assert departed({}, [{"g": "m"}]) == {}
    assert departed({"g": ""}, []) == {}


def test_members_round_trip_atomically_and_unknown_ids_are_left_out(tmp_path):
    path = tmp_path / "detect-1.json"
    write_members(path, {"g": "m-1", "h": ""})
    assert read_members(path) == {"g": "m-1"}
    write_members(path, {"g": "m-3"})  # a new id after a rejoin replaces the old one
    assert read_members(path) == {"g": "m-3"}
    assert [p.name for p in tmp_path.iterdir()] == ["detect-1.json"]  # no temporary file left


def test_unreadable_member_files_mean_no_members(tmp_path):
    assert read_members(None) == {}
    assert read_members(tmp_path / "missing.json") == {}
    (tmp_path / "half.json").write_text('{"g": ')
    assert read_members(tmp_path / "half.json") == {}
    (tmp_path / "list.json").write_text(json.dumps(["g", "m"]))
    assert read_members(tmp_path / "list.json") == {}
    (tmp_path / "typed.json").write_text(json.dumps({"g": 3, "h": "m"}))
    assert read_members(tmp_path / "typed.json") == {"h": "m"}
