"""The Kafka releases the local brokers run (``slipstream.streams.broker.versions``): one default, the supported
ones, a build folder per release, per-release logging and settings, the choice from the CLI and the
environment, data an older release cannot read refused, and the broker's ApiVersions v3 answer read."""
from __future__ import annotations

import struct
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from slipstream.cli import main
from slipstream.streams import broker
from slipstream.streams.broker import probe, process, versions
from slipstream.streams.config import kafka_version_from_env

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def test_one_default_among_the_supported_and_the_oldest_is_the_oldest():
    assert versions.DEFAULT_VERSION in versions.SUPPORTED and versions.OLDEST_VERSION in versions.SUPPORTED
    assert versions.SUPPORTED[0] == versions.DEFAULT_VERSION  # the default is the newest
    assert min(versions.SUPPORTED, key=lambda v: versions.RELEASES[v].key) == versions.OLDEST_VERSION
    assert versions.release().version == versions.DEFAULT_VERSION
    with pytest.raises(ValueError, match="not supported; supported: 4.4.0, 3.9.1"):
        versions.release("2.8.1")


def test_each_release_builds_in_a_folder_of_its_own(tmp_path):
    new, old = (broker.default_broker(root=tmp_path, version=v) for v in (versions.DEFAULT_VERSION, "3.9.1"))
    assert new.libs != old.libs and new.state_dir == old.state_dir
    assert new.build_dir == tmp_path / "build" / f"kafka-{versions.DEFAULT_VERSION}"
    assert {n.build_dir for n in broker.local_cluster(3, "x", root=tmp_path, version="3.9.1").nodes} == {old.build_dir}


def test_the_environment_picks_the_release_and_a_caller_overrides_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_KAFKA_VERSION", "3.9.1")
    assert kafka_version_from_env() == "3.9.1"
    assert broker.default_broker(root=tmp_path).kafka_version == "3.9.1"
    assert broker.local_cluster(3, "x", root=tmp_path).kafka_version == "3.9.1"
    assert broker.default_broker(root=tmp_path, version="4.4.0").kafka_version == "4.4.0"
    monkeypatch.setenv("SLIPSTREAM_KAFKA_VERSION", "")
    assert broker.default_broker(root=tmp_path).kafka_version == versions.DEFAULT_VERSION
    monkeypatch.setenv("SLIPSTREAM_KAFKA_VERSION", "3.0.0")
    with pytest.raises(ValueError, match="Kafka 3.0.0 is not supported"):
        broker.default_broker(root=tmp_path)


def test_the_cli_offers_exactly_the_supported_releases(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["kafka", "versions"]).output.splitlines()
    assert [line.split()[0] for line in out] == list(versions.SUPPORTED)
    assert runner.invoke(main, ["kafka", "versions", "--oldest"]).output.strip() == versions.OLDEST_VERSION
    assert runner.invoke(main, ["kafka", "versions", "--default"]).output.strip() == versions.DEFAULT_VERSION
    bad = runner.invoke(main, ["--state-dir", str(tmp_path), "kafka", "up", "--kafka-version", "2.8.1"])
    assert bad.exit_code == 2 and "'2.8.1' is not one of '4.4.0', '3.9.1'" in bad.output
    bad = runner.invoke(main, ["--state-dir", str(tmp_path), "kafka", "up"], env={"SLIPSTREAM_KAFKA_VERSION": "9.9.9"})
    assert bad.exit_code == 2


def test_logging_and_settings_follow_the_release(tmp_path):
    new = broker.default_broker(tmp_path / "n", version="4.4.0")
    old = broker.default_broker(tmp_path / "o", version="3.9.1")
    assert any(o.startswith("-Dlog4j2.configurationFile=file:") and o.endswith("log4j2.properties")
               for o in process._java_opts(new))
    assert any(o.startswith("-Dlog4j.configuration=file:") and o.endswith("/log4j.properties")
               for o in process._java_opts(old))
    assert "share.coordinator.state.topic.replication.factor=1\n" in broker.render_config(new)
    assert "share.coordinator" not in broker.render_config(old)
    import re

    assert not re.search(r"@[A-Z_]+@", broker.render_config(new))  # every placeholder filled, the release's own too


def test_the_pom_pins_no_release_and_has_each_releases_logging_profile():
    pom = ET.parse(broker.KAFKA_DEPLOY / "pom.xml").getroot()
    assert pom.find("m:properties/m:kafka.version", POM_NS) is None  # given by streams/broker/versions.py
    profiles = {p.findtext("m:id", namespaces=POM_NS) for p in pom.findall("m:profiles/m:profile", POM_NS)}
    assert {versions.RELEASES[v].maven_profile for v in versions.SUPPORTED} <= profiles
    for v in versions.SUPPORTED:
        assert (broker.KAFKA_DEPLOY / versions.RELEASES[v].log_config).is_file()


def test_an_older_release_is_refused_on_data_a_newer_one_wrote(tmp_path):
    new = broker.default_broker(tmp_path / "k", version="4.4.0")
    old = broker.default_broker(tmp_path / "k", version="3.9.1")
    assert broker.data_version(old) is None  # not formatted: anything may start
    process.check_data_version(old)
    (tmp_path / "k" / "data").mkdir(parents=True)
    (tmp_path / "k" / "data" / "meta.properties").write_text("version=1\n")
    assert broker.data_version(new) == "3.9.1"  # formatted before releases were recorded
    process.check_data_version(new)  # a newer release upgrades it
    new.version_file.write_text("4.4.0")
    with pytest.raises(broker.BrokerError, match="written by Kafka 4.4.0, which Kafka 3.9.1 cannot read"):
        process.check_data_version(old)


def _api_versions_answer(correlation_id: int) -> bytes:
    """An ApiVersions v3 response body as a 4.4 broker encodes it (after the size prefix)."""
    def cstr(s: str) -> bytes:
        return probe._uvarint(len(s) + 1) + s.encode()

    apis = [(0, 3, 13), (18, 0, 4), (28, 0, 5)]
    body = struct.pack(">ih", correlation_id, 0) + probe._uvarint(len(apis) + 1)
    body += b"".join(struct.pack(">hhh", *a) + b"\0" for a in apis) + struct.pack(">i", 0)
    supported = probe._uvarint(3) + cstr("metadata.version") + struct.pack(">hh", 7, 33) + b"\0" \
        + cstr("transaction.version") + struct.pack(">hh", 0, 2) + b"\0"
    # finalized: (max version level, min version level); the max is the finalized level
    finalized = probe._uvarint(3) + cstr("metadata.version") + struct.pack(">hh", 33, 21) + b"\0" \
        + cstr("transaction.version") + struct.pack(">hh", 2, 0) + b"\0"
    epoch = struct.pack(">q", 5)
    tags = [(0, supported), (1, epoch), (2, finalized)]
    body += probe._uvarint(len(tags)) + b"".join(probe._uvarint(t) + probe._uvarint(len(v)) + v for t, v in tags)
    return body


def test_the_api_versions_v3_answer_is_read_with_its_features():
    got = probe._parse_api_versions(_api_versions_answer(7), 7)
    assert got["api_versions"] == {0: (3, 13), 18: (0, 4), 28: (0, 5)}
    assert got["supported_features"] == {"metadata.version": (7, 33), "transaction.version": (0, 2)}
    assert got["finalized_features"] == {"metadata.version": 33, "transaction.version": 2}
    assert versions.metadata_version_name(33) == "4.4-IV2" and versions.metadata_version_name(21) == "3.9-IV0"
    with pytest.raises(ValueError, match="another request"):
        probe._parse_api_versions(_api_versions_answer(7), 8)


def test_the_request_is_api_versions_v3_with_a_valid_software_name():
    frame = probe._api_versions_request(3)
    size, key, version, corr = struct.unpack_from(">ihhi", frame)
    assert (size, key, version, corr) == (len(frame) - 4, 18, 3, 3)
    assert frame.endswith(b"\x0bslipstream\x021\x00")  # compact strings, then no tagged fields
