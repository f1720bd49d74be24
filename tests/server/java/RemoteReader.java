/*
 * Reads one partition from its first offset with Kafka's own Java client (kafka-clients), as
 * tests/tiered/test_reads_clients.py runs it against a topic whose first segments are only in the object store.
 *
 *   java -cp CLASSES:JARS RemoteReader bootstrap topic partition
 *
 * It first asks the Admin client for the partition's offsets: OffsetSpec.earliest() (-2), earliestLocal() (-4,
 * ListOffsets v8), latestTiered() (-5, v9) and latest() (-1), and prints them as one JSON line
 * {"earliest": n, "earliest_local": n, "latest_tiered": n, "latest": n}. Then a KafkaConsumer (no group,
 * auto.offset.reset=earliest, check.crcs=true) assigned the partition reads from its beginning to the latest offset
 * and prints one line per record, "offset<TAB>value" (the value as UTF-8), then {"done": count}. Any exception
 * exits 3 with its text on stderr.
 */

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class RemoteReader {
    static long offset(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        ListOffsetsResult result = admin.listOffsets(Collections.singletonMap(tp, spec));
        return result.partitionResult(tp).get().offset();
    }

    public static void main(String[] args) {
        try {
            String bootstrap = args[0];
            TopicPartition tp = new TopicPartition(args[1], Integer.parseInt(args[2]));
            Properties common = new Properties();
            common.put("bootstrap.servers", bootstrap);
            long latest;
            try (Admin admin = Admin.create(common)) {
                long earliest = offset(admin, tp, OffsetSpec.earliest());
                long earliestLocal = offset(admin, tp, OffsetSpec.earliestLocal());
                long latestTiered = offset(admin, tp, OffsetSpec.latestTiered());
                latest = offset(admin, tp, OffsetSpec.latest());
                System.out.println("{\"earliest\": " + earliest + ", \"earliest_local\": " + earliestLocal
                        + ", \"latest_tiered\": " + latestTiered + ", \"latest\": " + latest + "}");
            }
            Properties props = new Properties();
            props.putAll(common);
            props.put("enable.auto.commit", "false");
            props.put("auto.offset.reset", "earliest");
            props.put("check.crcs", "true");
            props.put("max.partition.fetch.bytes", "65536");
            long count = 0;
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(),
                    new ByteArrayDeserializer())) {
                consumer.assign(Collections.singletonList(tp));
                consumer.seekToBeginning(Collections.singletonList(tp));
                long deadline = System.currentTimeMillis() + 120_000;
                while (consumer.position(tp) < latest) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("stuck at offset " + consumer.position(tp) + " of " + latest);
                    }
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                        String value = r.value() == null ? "" : new String(r.value(), StandardCharsets.UTF_8);
                        System.out.println(r.offset() + "\t" + value);
                        count++;
                    }
                }
            }
            System.out.println("{\"done\": " + count + "}");
            System.out.flush();
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(3);
        }
    }
}
