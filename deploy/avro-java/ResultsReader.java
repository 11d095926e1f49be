// Reads InferenceResults from a Slipstream results topic with Apache Avro's own single-object decoder
// (BinaryMessageDecoder), built from schemas/HopTiming.avsc and schemas/InferenceResult.avsc: it
// accepts a record only if its header carries the CRC-64-AVRO fingerprint of the schema's Parsing
// Canonical Form. Prints one line per record (with the first hop's model digest), then a count.
//
//   java -cp 'deploy/avro-java/target/libs/*' deploy/avro-java/ResultsReader.java BOOTSTRAP TOPIC N [SCHEMAS_DIR]
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ResultsReader {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int want = Integer.parseInt(args[2]);
        File dir = new File(args.length > 3 ? args[3] : "schemas");
        Schema.Parser parser = new Schema.Parser();  // keeps named types between files
        parser.parse(new File(dir, "HopTiming.avsc"));
        Schema schema = parser.parse(new File(dir, "InferenceResult.avsc"));
        System.out.printf("schema %s fingerprint %016x%n", schema.getFullName(),
                          SchemaNormalization.parsingFingerprint64(schema));
        BinaryMessageDecoder<GenericRecord> decoder = new BinaryMessageDecoder<>(GenericData.get(), schema);

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        int read = 0, rejected = 0;
        try (KafkaConsumer<String, byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic)) tps.add(new TopicPartition(topic, p.partition()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 30_000;
            while (read + rejected < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    try {
                        GenericRecord v = decoder.decode(r.value());
                        GenericData.Array<?> hops = (GenericData.Array<?>) v.get("hops");
                        ByteBuffer out = (ByteBuffer) v.get("output");
                        String shown = StandardCharsets.UTF_8.decode(out.duplicate()).toString();
                        Object digest = hops.isEmpty() ? "" : ((GenericRecord) hops.get(0)).get("model_digest");
                        System.out.printf("%s %s hops=%d model=%s latency_ms=%.1f output=%s%n", v.get("request_id"),
                                v.get("status"), hops.size(), digest,
                                ((Long) v.get("finished_ns") - (Long) v.get("created_ns")) / 1e6,
                                shown.length() > 80 ? shown.substring(0, 80) + "..." : shown);
                        read++;
                    } catch (Exception e) {
                        System.out.printf("rejected offset %d: %s%n", r.offset(), e);
                        rejected++;
                    }
                }
            }
        }
        System.out.printf("read %d, rejected %d%n", read, rejected);
        System.exit(read >= want && rejected == 0 ? 0 : 1);
    }
}
