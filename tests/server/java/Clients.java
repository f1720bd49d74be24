/*
 * The producer and consumer commands of Driver.java, on KafkaProducer<String, String> and
 * KafkaConsumer<String, String> kept by name (and the Admin clients, made here and used by AdminOps.java).
 *
 * Producer: send {name, topic, values, keys?, partition?} (sends all, then flush; answers [{partition, offset}]),
 * init_transactions, begin, commit, abort, send_offsets {name, consumer, offsets: {"topic:partition": offset}}
 * (the consumer's group metadata). Consumer: subscribe {name, topics}, assign {name, partitions: ["t:p"]},
 * poll {name, count, timeout_ms} (polls until count records or the timeout: [{topic, partition, offset, key,
 * value, headers}]), commit_sync, assignment, group_metadata ({group, generation, member, instance}), position
 * {name, partition}, seek {name, partition, offset}, unsubscribe.
 */

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class Clients {
    final Map<String, Admin> admins = new HashMap<>();
    final Map<String, KafkaProducer<String, String>> producers = new HashMap<>();
    final Map<String, KafkaConsumer<String, String>> consumers = new HashMap<>();

    static final Set<String> OPS = Set.of("admin", "producer", "consumer", "close", "send", "init_transactions",
            "begin", "commit", "abort", "send_offsets", "subscribe", "assign", "poll", "commit_sync", "assignment",
            "group_metadata", "position", "seek", "unsubscribe", "enforce_rebalance");

    boolean handles(String op) { return OPS.contains(op); }

    static Properties props(Map<String, Object> cmd) {
        Properties p = new Properties();
        @SuppressWarnings("unchecked")
        Map<String, Object> config = (Map<String, Object>) cmd.getOrDefault("config", Map.of());
        config.forEach((k, v) -> p.put(k, String.valueOf(v)));
        return p;
    }

    static TopicPartition tp(String s) {
        int colon = s.lastIndexOf(':');
        return new TopicPartition(s.substring(0, colon), Integer.parseInt(s.substring(colon + 1)));
    }

    static String name(TopicPartition tp) { return tp.topic() + ":" + tp.partition(); }

    Admin admin(Map<String, Object> cmd) {
        Admin a = admins.get((String) cmd.getOrDefault("client", "admin"));
        if (a == null) throw new IllegalArgumentException("no admin client named " + cmd.get("client"));
        return a;
    }

    KafkaProducer<String, String> producer(Map<String, Object> cmd) {
        KafkaProducer<String, String> p = producers.get((String) cmd.get("name"));
        if (p == null) throw new IllegalArgumentException("no producer named " + cmd.get("name"));
        return p;
    }

    KafkaConsumer<String, String> consumer(String name) {
        KafkaConsumer<String, String> c = consumers.get(name);
        if (c == null) throw new IllegalArgumentException("no consumer named " + name);
        return c;
    }

    @SuppressWarnings("unchecked")
    Object run(String op, Map<String, Object> cmd) throws Exception {
        String name = (String) cmd.get("name");
        switch (op) {
            case "admin":
                admins.put(name, Admin.create(props(cmd)));
                return name;
            case "producer":
                producers.put(name, new KafkaProducer<>(props(cmd), new StringSerializer(), new StringSerializer()));
                return name;
            case "consumer":
                consumers.put(name, new KafkaConsumer<>(props(cmd), new StringDeserializer(),
                        new StringDeserializer()));
                return name;
            case "close": {
                Duration d = Duration.ofMillis(((Number) cmd.getOrDefault("timeout_ms", 30000L)).longValue());
                if (admins.containsKey(name)) admins.remove(name).close(d);
                else if (producers.containsKey(name)) producers.remove(name).close(d);
                else consumer(name).close(d);
                consumers.remove(name);
                return name;
            }
            case "send": {
                KafkaProducer<String, String> p = producer(cmd);
                List<Object> values = (List<Object>) cmd.get("values");
                List<Object> keys = (List<Object>) cmd.get("keys");
                Number partition = (Number) cmd.get("partition");
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < values.size(); i++) {
                    String key = keys == null ? null : (String) keys.get(i);
                    sent.add(p.send(new ProducerRecord<>((String) cmd.get("topic"),
                            partition == null ? null : partition.intValue(), key, (String) values.get(i))));
                }
                p.flush();
                List<Object> out = new ArrayList<>();
                for (Future<RecordMetadata> f : sent) {
                    RecordMetadata m = f.get();
                    out.add(Map.of("partition", m.partition(), "offset", m.offset()));
                }
                return out;
            }
            case "init_transactions": producer(cmd).initTransactions(); return null;
            case "begin": producer(cmd).beginTransaction(); return null;
            case "commit": producer(cmd).commitTransaction(); return null;
            case "abort": producer(cmd).abortTransaction(); return null;
            case "send_offsets": {
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                ((Map<String, Object>) cmd.get("offsets")).forEach(
                        (k, v) -> offsets.put(tp(k), new OffsetAndMetadata(((Number) v).longValue())));
                producer(cmd).sendOffsetsToTransaction(offsets,
                        consumer((String) cmd.get("consumer")).groupMetadata());
                return null;
            }
            case "subscribe": consumer(name).subscribe((List<String>) cmd.get("topics")); return null;
            case "unsubscribe": consumer(name).unsubscribe(); return null;
            case "enforce_rebalance": consumer(name).enforceRebalance(); return null;
            case "assign": {
                List<TopicPartition> tps = new ArrayList<>();
                for (Object s : (List<Object>) cmd.get("partitions")) tps.add(tp((String) s));
                consumer(name).assign(tps);
                return null;
            }
            case "poll": {
                KafkaConsumer<String, String> c = consumer(name);
                int count = ((Number) cmd.getOrDefault("count", 0L)).intValue();
                long deadline = System.currentTimeMillis()
                        + ((Number) cmd.getOrDefault("timeout_ms", 30000L)).longValue();
                List<Object> out = new ArrayList<>();
                do {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        Map<String, Object> rec = new LinkedHashMap<>();
                        rec.put("topic", r.topic());
                        rec.put("partition", r.partition());
                        rec.put("offset", r.offset());
                        rec.put("key", r.key());
                        rec.put("value", r.value());
                        Map<String, Object> headers = new LinkedHashMap<>();
                        for (Header h : r.headers()) headers.put(h.key(), new String(h.value(), StandardCharsets.UTF_8));
                        rec.put("headers", headers);
                        out.add(rec);
                    }
                } while (out.size() < count && System.currentTimeMillis() < deadline);
                return out;
            }
            case "commit_sync": consumer(name).commitSync(); return null;
            case "assignment": {
                Set<String> out = new TreeSet<>();
                for (TopicPartition tp : consumer(name).assignment()) out.add(name(tp));
                return out;
            }
            case "group_metadata": {
                ConsumerGroupMetadata m = consumer(name).groupMetadata();
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("group", m.groupId());
                out.put("generation", m.generationId());
                out.put("member", m.memberId());
                out.put("instance", m.groupInstanceId());
                return out;
            }
            case "position": return consumer(name).position(tp((String) cmd.get("partition")));
            case "seek":
                consumer(name).seek(tp((String) cmd.get("partition")), ((Number) cmd.get("offset")).longValue());
                return null;
            default: throw new IllegalArgumentException("unknown op " + op);
        }
    }

    void closeAll() {
        admins.values().forEach(a -> a.close(Duration.ofSeconds(5)));
        producers.values().forEach(p -> p.close(Duration.ofSeconds(5)));
        consumers.values().forEach(c -> c.close(Duration.ofSeconds(5)));
    }
}
