"""Where the tests find data outside the repository: the shared research data lives beside the
checkout, at ../shared/research-data; tests that need it skip cleanly when it is absent."""
from pathlib import Path

RESEARCH_DATA = Path(__file__).resolve().parents[2] / "shared" / "research-data"
