// Sends InferenceRequests to a Slipstream pipeline from Java and reads their results, both in the
// Confluent wire format (00, the 4-byte schema id, the Avro body) through a schema registry, with the
// registry's stock Kafka serdes (Apicurio Registry's AvroKafkaSerializer / AvroKafkaDeserializer,
// configured for Confluent's framing: Confluent's own KafkaAvroSerializer is not on Maven Central).
// The records are Apache Avro GenericRecords built from schemas/HopTiming.avsc and
// schemas/InferenceRequest.avsc; the workers must run with SLIPSTREAM_SCHEMA_REGISTRY_URL set to the
// same registry (its Confluent-compatible API) so the results come back in the same format.
//
//   java -cp 'deploy/avro-java/target/libs/*' deploy/avro-java/RequestProducer.java \
//        BOOTSTRAP REGISTRY_URL INPUT_TOPIC RESULTS_TOPIC PIPELINE N [SCHEMAS_DIR]
//
// REGISTRY_URL is the registry's base (http://127.0.0.1:18081 for `slipstream registry up`). The
// results reader is assigned every partition of RESULTS_TOPIC and positioned at its end before the
// first request is sent, so it sees every result of these requests. Prints one line per result, then
// a count; exits 0 when every request was answered `done` within 60 s.
import io.apicurio.registry.serde.SerdeConfig;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class RequestProducer {
    /** The registry settings both serdes share: Confluent framing (the id in the value, 4 bytes, the
     *  content id that the Confluent-compatible API calls the schema id), no Apicurio headers. */
    static Map<String, Object> serde(String registry) {
        Map<String, Object> c = new HashMap<>();
        c.put(SerdeConfig.REGISTRY_URL, registry + "/apis/registry/v2");
        c.put(SerdeConfig.ENABLE_HEADERS, false);
        c.put(SerdeConfig.ENABLE_CONFLUENT_ID_HANDLER, true);
        c.put(SerdeConfig.USE_ID, "contentId");
        c.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, true);  // under <topic>-value, as the Python writers
        return c;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], registry = args[1], input = args[2], results = args[3], pipeline = args[4];
        int n = Integer.parseInt(args[5]);
        File dir = new File(args.length > 6 ? args[6] : "schemas");
        Schema.Parser parser = new Schema.Parser();  // keeps named types between files
        parser.parse(new File(dir, "HopTiming.avsc"));
        Schema schema = parser.parse(new File(dir, "InferenceRequest.avsc"));

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("isolation.level", "read_committed");
        AvroKafkaDeserializer<GenericRecord> values = new AvroKafkaDeserializer<>();
        values.configure(serde(registry), false);
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("acks", "all");
        pp.put("enable.idempotence", true);
        AvroKafkaSerializer<GenericRecord> serializer = new AvroKafkaSerializer<>();
        serializer.configure(serde(registry), false);

        Map<String, Long> sent = new HashMap<>();  // request id -> created_ns
        int done = 0, other = 0;
        try (KafkaConsumer<String, GenericRecord> consumer = new KafkaConsumer<>(cp, new StringDeserializer(), values);
             KafkaProducer<String, GenericRecord> producer = new KafkaProducer<>(pp, new StringSerializer(), serializer)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(results)) tps.add(new TopicPartition(results, p.partition()));
            consumer.assign(tps);
            consumer.seekToEnd(tps);
            for (TopicPartition tp : tps) consumer.position(tp);  // resolved now, before any request is sent

            for (int i = 0; i < n; i++) {
                long now = System.currentTimeMillis() * 1_000_000L;
                String id = UUID.randomUUID().toString().replace("-", "");
                GenericRecord r = new GenericData.Record(schema);
                r.put("request_id", id);
                r.put("pipeline", pipeline);
                r.put("created_ns", now);
                r.put("deadline_ns", now + 10_000_000_000L);
                r.put("accuracy_floor", null);
                r.put("content_type", "text/plain");
                r.put("payload", ByteBuffer.wrap(("hello from java " + i).getBytes(StandardCharsets.UTF_8)));
                r.put("hops", new GenericData.Array<>(0, schema.getField("hops").schema()));
                r.put("fragment", "1");
                r.put("path", new GenericData.Array<>(0, schema.getField("path").schema()));
                r.put("accuracy", 1.0);
                ProducerRecord<String, GenericRecord> rec = new ProducerRecord<>(input, null, now / 1_000_000L, id, r);
                rec.headers().add("slipstream-schema", "InferenceRequest".getBytes(StandardCharsets.UTF_8));
                producer.send(rec).get();  // acknowledged by every in-sync replica
                sent.put(id, now);
            }
            System.out.printf("sent %d InferenceRequests to %s%n", n, input);

            long deadline = System.currentTimeMillis() + 60_000;
            while (done + other < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, GenericRecord> c : consumer.poll(Duration.ofMillis(200))) {
                    GenericRecord v = c.value();
                    String id = v.get("request_id").toString();
                    if (sent.remove(id) == null) continue;  // another client's request
                    String out = StandardCharsets.UTF_8.decode(((ByteBuffer) v.get("output")).duplicate()).toString();
                    System.out.printf("%s %s latency_ms=%.1f hops=%d output=%s%n", id, v.get("status"),
                            ((Long) v.get("finished_ns") - (Long) v.get("created_ns")) / 1e6,
                            ((GenericData.Array<?>) v.get("hops")).size(), out);
                    if ("done".equals(v.get("status").toString())) done++; else other++;
                }
            }
        }
        System.out.printf("results: %d done, %d not done, %d missing%n", done, other, sent.size());
        System.exit(done == n ? 0 : 1);
    }
}
