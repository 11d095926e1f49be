"""Where Slipstream's deploy assets are (example pipelines, the broker's and the registry's Maven
builds, monitoring rules and dashboard): the checkout's ``deploy/`` when running from a source tree,
else the copy the wheel installs as package data (``streams/deploy``). Assets are read, never written:
builds and state go to the state directory the CLI names (``slipstream --state-dir``)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_STATE_DIR = Path(".state")  # relative to the working directory


def deploy_dir() -> Path:
    """The deploy assets' folder (read-only)."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "deploy").is_dir():
        return checkout / "deploy"
    return Path(str(resources.files("slipstream.streams").joinpath("deploy")))


def staged(src: Path, dst: Path) -> Path:
    """A writable copy of the build folder ``src`` at ``dst`` (copied once; Maven writes its
    ``target/`` there, never into the assets)."""
    import shutil

    if not dst.is_dir():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("target"))
    return dst
