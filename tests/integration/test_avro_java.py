"""A Java producer against the real broker, registry and a worker: ``deploy/avro-java/RequestProducer.java``
sends InferenceRequests in the Confluent wire format with the registry's stock Kafka Avro serializer
(Apicurio's), the Python worker reads and answers them, and the Java program reads the results with the
stock deserializer. Built with Maven from Maven Central (``deploy/avro-java/pom.xml``), run with the JDK's
source launcher."""
from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slipstream.streams import admin, codec, topics
from slipstream.streams.spec import load_pipeline

from .helpers import assert_exactly_once
from .test_schema_registry import registry  # noqa: F401 - the module's registry fixture
from .workers import Workers

ROOT = Path(__file__).resolve().parents[2]
JAVA = ROOT / "deploy" / "avro-java"


def build() -> None:
    if not (shutil.which("mvn") and shutil.which("java")):
        pytest.skip("needs a JDK and Maven (Debian: apt-get install default-jdk-headless maven)")
    subprocess.run(["mvn", "-B", "-q", "-f", str(JAVA / "pom.xml"), "package"], check=True, timeout=900)


async def test_a_java_producer_sends_requests_in_the_confluent_format_and_reads_the_results(
        kafka, registry, unique, tmp_path):  # noqa: F811 - the imported fixture
    await asyncio.to_thread(build)
    doc = {"name": unique, "slo_ms": 10_000, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": "relay", "variants": [{"name": "noop", "model": "noop", "accuracy": 1.0,
                                                      "params": {"content_type": "text/plain"}}],
                       "defaults": {"max_batch": 4, "batch_timeout_ms": 2, "partitions": 2}}], "edges": []}
    path = tmp_path / f"{unique}.yaml"
    path.write_text(yaml.safe_dump(doc))
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap, env={"SLIPSTREAM_SCHEMA_REGISTRY_URL": registry.url})
    base = registry.url.split("/apis/")[0]
    try:
        await asyncio.to_thread(workers.start, "relay")
        out = await asyncio.to_thread(
            subprocess.run, ["java", "-cp", str(JAVA / "target" / "libs" / "*"), str(JAVA / "RequestProducer.java"),
                             kafka.bootstrap, base, topics.stage_input(unique, "relay"), topics.results(unique),
                             unique, "5", str(ROOT / "schemas")], capture_output=True, text=True, timeout=180)
    finally:
        workers.stop()
    print(out.stdout, out.stderr[-2000:])
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    answered = re.findall(r"^([0-9a-f]{32}) done latency_ms=\S+ hops=1 output=hello from java (\d)$", out.stdout, re.M)
    assert sorted(i for _, i in answered) == list("01234") and "results: 5 done, 0 not done, 0 missing" in out.stdout
    codec.use_registry(registry.url)  # the results are in the Confluent format (reset by the fixture)
    await assert_exactly_once(kafka, unique, [rid for rid, _ in answered])
