"""Commit subjects are one line of at most 72 characters; the detail goes in the body. Checked on every
commit after ``SINCE`` (the history before it keeps its longer subjects; git keeps it as it was).
Skipped outside a git checkout (an unpacked sdist)."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SINCE = "6b3b2ad8dc979943f2094bdd98826f7320fd6d4d"
LIMIT = 72


def subjects_since(since: str) -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{since}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"{since[:7]} is not in this clone's history (a shallow clone)")
    out = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%s", f"{since}..HEAD"],
                         capture_output=True, text=True, check=True)
    return [s for s in out.stdout.splitlines() if s]


def too_long(subjects: list[str], limit: int = LIMIT) -> list[str]:
    return [f"{len(s)}: {s}" for s in subjects if len(s) > limit]


def test_the_rule_flags_a_long_subject():
    assert too_long(["x" * 72, "y" * 73]) == [f"73: {'y' * 73}"]


def test_every_commit_subject_since_the_rule_fits_in_72_characters():
    assert too_long(subjects_since(SINCE)) == []
