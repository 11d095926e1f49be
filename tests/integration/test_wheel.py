"""The package outside the checkout: the wheel built from the tracked files, installed with the extra
`worker` only (no solver, no plotting, no torch) into a fresh virtualenv in a temporary folder, serves
the shipped example pipeline `thumbnail` through the broker from there, and writes nothing into its
site-packages (deploy assets are read from the package; state goes to ./.state of the working folder).

The install takes packages from pip's cache (or PyPI on a first run); the broker is the shared one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from slipstream.streams.procs import WORKER_READY, ReadyProcess

ROOT = Path(__file__).resolve().parents[2]


def sh(*argv, cwd: Path, env: dict | None = None, timeout: float = 120) -> str:
    out = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{argv}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv outside the checkout holding the built wheel with the extra `worker`."""
    tmp = tmp_path_factory.mktemp("wheel")
    assert ROOT not in tmp.parents
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    tracked = sh("git", "ls-files", "-z", cwd=ROOT).split("\0")
    for rel in filter(None, tracked):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, src, cwd=tmp)
    wheel = next(dist.glob("slipstream-*.whl"))
    sh(sys.executable, "-m", "venv", venv, cwd=tmp)
    sh(venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", "-c", ROOT / "constraints.txt",
       f"{wheel}[worker]", cwd=tmp, timeout=900)
    return venv


def test_the_installed_wheel_serves_an_example_pipeline(installed, kafka, tmp_path):
    venv, run = installed, tmp_path / "run"
    run.mkdir()
    bin_ = venv / "bin" / "slipstream"
    site = next((venv / "lib").glob("python3*/site-packages"))
    before = files(site)
    prefix = f"wheel{uuid.uuid4().hex[:8]}"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)),
           "SLIPSTREAM_BOOTSTRAP": kafka.bootstrap, "SLIPSTREAM_TOPIC_PREFIX": prefix,
           "SLIPSTREAM_GROUP_PREFIX": prefix}

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert sh(bin_, "--version", cwd=run, env=env).strip().endswith(version)
    shipped = sh(bin_, "examples", cwd=run, env=env).split()
    assert shipped and all(Path(p).is_relative_to(site) for p in shipped)  # read from the package
    copied = sh(bin_, "examples", "--copy", "ex", cwd=run, env=env).split()
    sh(bin_, "validate", *[p for p in copied if p.endswith(".yaml")], cwd=run, env=env)
    spec = run / "ex" / "thumbnail.yaml"
    sh(sys.executable, "-c", "import sys; from PIL import Image; Image.new('RGB', (200, 150), (255, 0, 0)).save(sys.argv[1])",
       run / "red.png", cwd=run)
    assert "thumbnail.in" in sh(bin_, "topics", "--pipeline", spec, cwd=run, env=env)

    worker = ReadyProcess([str(bin_), "worker", "--pipeline", str(spec), "--stage", "thumbnail", "--loglevel", "info"],
                          WORKER_READY, env=env, name="installed worker")
    try:
        worker.wait_ready(120)
        res = json.loads(sh(bin_, "submit", "--pipeline", spec, "--input", run / "red.png", "--timeout", "60",
                            cwd=run, env=env))
    finally:
        worker.stop()
    assert res["status"] == "done" and res["content_type"] == "image/x-raw-uint8;shape=64,64,3", res
    assert res["output"] == f"<{64 * 64 * 3} bytes image/x-raw-uint8;shape=64,64,3>"

    after = files(site)
    assert after == before, f"written under site-packages: {sorted(set(after.items()) ^ set(before.items()))[:10]}"
    missing = sh(venv / "bin" / "python", "-c", "import importlib.util as u; print([m for m in ('mip', 'matplotlib', "
                 "'torch') if u.find_spec(m) is None])", cwd=run, env=env)
    assert missing.strip() == "['mip', 'matplotlib', 'torch']"  # the worker extra carries none of them
