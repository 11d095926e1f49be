"""Where the CLI writes and what it reads: one state directory (``--state-dir``, SLIPSTREAM_STATE_DIR,
default ./.state) for the broker, builds, profiles and logs; deploy assets read from the package;
one spelling per flag idea (old spellings hidden aliases)."""
from __future__ import annotations

import json
from pathlib import Path

import click
from click.testing import CliRunner

from slipstream.cli import main
from slipstream.streams import broker
from slipstream.streams.assets import deploy_dir

ROOT = Path(__file__).resolve().parents[2]


def status_json(*args: str, env: dict | None = None) -> dict:
    res = CliRunner().invoke(main, [*args, "kafka", "status", "--json", "--port", "1"], env=env)
    return json.loads(res.output)


def test_the_state_dir_places_the_broker_state(tmp_path):
    assert status_json("--state-dir", str(tmp_path))["state_dir"] == str(tmp_path / "kafka")
    assert status_json(env={"SLIPSTREAM_STATE_DIR": str(tmp_path / "e")})["state_dir"] == str(tmp_path / "e" / "kafka")
    assert status_json()["state_dir"] == ".state/kafka"  # relative to where it runs


def test_builds_go_to_the_state_dir_not_the_assets(tmp_path):
    b = broker.default_broker(root=tmp_path)
    assert b.libs.is_relative_to(tmp_path) and not b.libs.is_relative_to(deploy_dir())
    assert all(n.libs.is_relative_to(tmp_path) for n in broker.local_cluster(3, "x", root=tmp_path).nodes)
    assert (deploy_dir() / "kafka" / "pom.xml").is_file() and (deploy_dir() / "pipelines" / "thumbnail.yaml").is_file()


def test_profiles_have_one_default_under_the_state_dir(tmp_path):
    from slipstream.commands.plan import plan
    from slipstream.commands.planner_service import planner_cmd
    from slipstream.commands.profile import profile

    seen = {}
    for cmd in (profile, plan, planner_cmd):
        opt = next(p for p in cmd.params if p.name in ("out_dir", "profiles_dir"))
        with click.Context(main, info_name="slipstream") as root:
            root.params["state_dir"] = str(tmp_path)
            seen[cmd.name] = opt.get_default(click.Context(cmd, parent=root))
    assert set(seen.values()) == {str(tmp_path / "profiles")}, seen


def test_planner_takes_the_tuners_spelling_and_the_old_one():
    from slipstream.commands.planner_service import planner_cmd

    shown = CliRunner().invoke(main, ["planner", "--help"]).output
    assert "--interval-s" in shown and "--lookback-s" in shown
    assert "--interval " not in shown and "--lookback " not in shown and "--interval," not in shown
    for new, old, value in (("--interval-s", "--interval", 7.0), ("--lookback-s", "--lookback", 9.0)):
        for spelling in (new, old):
            ctx = planner_cmd.make_context("planner", ["--pipeline", __file__, spelling, str(value)])
            assert ctx.params[new[2:].replace("-", "_")] == value


def test_version():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0 and res.output.strip().endswith(version)
