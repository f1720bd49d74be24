/*
 * A consume-transform-produce worker with exactly-once output, on Kafka's own Java client (kafka-clients), run as
 * its own process by tests/server/test_txn_java.py and tests/server/java/restarts.py.
 *
 *   java -cp CLASSES:JARS TxnWorker key=value ...
 *
 * Keys: bootstrap; input and output (topics); ends, the input's end offset per partition ("0:1000,1:1000");
 * group; instance (its group.instance.id: a restarted worker takes the killed one's place at once);
 * transactional_id; commit_every; work_ms, the time the transform of one record takes (it sleeps that long).
 *
 * It consumes the input as a member of the group (read_committed, no auto commit) and, for every input record,
 * produces "<partition>:<offset>:<value>" to the same partition of the output within a transaction. Every
 * commit_every records (a poll brings at most that many), or when a poll brings none, it sends the positions after
 * the records of the transaction with sendOffsetsToTransaction and commits. As Kafka's documentation says: a
 * TimeoutException of sendOffsetsToTransaction or commitTransaction is retried (the call resumes where it was);
 * ProducerFenced, OutOfOrderSequence, UnsupportedVersion and authorization errors are fatal (exit 3); any other
 * KafkaException aborts the transaction and rewinds every assigned partition to the group's committed offset. A
 * rebalance that takes partitions away aborts the open transaction. It exits 0 once the group's committed offsets
 * are the ends.
 *
 * stdout carries one JSON object per line: {"event": "started"}; {"event": "committed", "records": n,
 * "offsets": {partition: offset}, "send_offsets_ms": t, "commit_ms": t} after each commit, the times being those
 * of the whole call with its retries; {"event": "retry", "call": ..., "error": ...}; {"event": "aborted",
 * "reason": ...}; {"event": "fatal", "error": ...}; {"event": "done"}. The clients' own log goes to stderr
 * (slf4j without a binding logs nothing).
 */

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Callable;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnWorker {
    /** How long one call may keep timing out before the worker gives up (exit 3). */
    static final long WAIT_MS = 120_000;
    /** max.block.ms: the bound of each transactional call before it throws TimeoutException. */
    static final int CALL_TIMEOUT_MS = 30_000;

    static final class Fatal extends Exception {
        Fatal(String message, Throwable cause) { super(message, cause); }
    }

    final Map<String, String> spec;
    final String input;
    final String output;
    final Map<Integer, Long> ends = new TreeMap<>();
    final int commitEvery;
    final long workMs;
    final KafkaConsumer<byte[], byte[]> consumer;
    final KafkaProducer<byte[], byte[]> producer;
    boolean inTxn = false;
    final Map<Integer, Long> pending = new TreeMap<>();   // partition -> offset after its last record in the txn
    int records = 0;

    TxnWorker(Map<String, String> spec) {
        this.spec = spec;
        input = spec.get("input");
        output = spec.get("output");
        for (String pair : spec.get("ends").split(",")) {
            String[] kv = pair.split(":");
            ends.put(Integer.parseInt(kv[0]), Long.parseLong(kv[1]));
        }
        commitEvery = Integer.parseInt(spec.get("commit_every"));
        workMs = Long.parseLong(spec.getOrDefault("work_ms", "0"));
        Properties c = new Properties();
        c.put("bootstrap.servers", spec.get("bootstrap"));
        c.put("group.id", spec.get("group"));
        c.put("group.instance.id", spec.get("instance"));
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("session.timeout.ms", "10000");
        c.put("heartbeat.interval.ms", "500");
        c.put("max.poll.interval.ms", "120000");
        c.put("max.poll.records", String.valueOf(commitEvery));   // a transaction is one poll's records
        c.put("reconnect.backoff.max.ms", "500");
        c.put("default.api.timeout.ms", String.valueOf(CALL_TIMEOUT_MS));
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        consumer = new KafkaConsumer<>(c);
        Properties p = new Properties();
        p.put("bootstrap.servers", spec.get("bootstrap"));
        p.put("transactional.id", spec.get("transactional_id"));
        p.put("transaction.timeout.ms", "60000");
        p.put("linger.ms", "5");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("max.block.ms", String.valueOf(CALL_TIMEOUT_MS));
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        producer = new KafkaProducer<>(p);
    }

    static void say(String event, String fields) {
        System.out.println("{\"event\": \"" + event + "\"" + (fields.isEmpty() ? "" : ", " + fields) + "}");
        System.out.flush();
    }

    static String quote(Object o) {
        return "\"" + String.valueOf(o).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static String offsets(Map<Integer, Long> m) {
        List<String> parts = new ArrayList<>();
        m.forEach((k, v) -> parts.add("\"" + k + "\": " + v));
        return "{" + String.join(", ", parts) + "}";
    }

    static boolean fatal(KafkaException e) {
        return e instanceof ProducerFencedException || e instanceof OutOfOrderSequenceException
            || e instanceof UnsupportedVersionException || e instanceof AuthorizationException;
    }

    /** fn() retried while it times out; a fatal error becomes Fatal, any other KafkaException goes up. */
    static <T> T call(String what, Callable<T> fn) throws Fatal {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (true) {
            try {
                return fn.call();
            } catch (TimeoutException e) {
                if (System.currentTimeMillis() > deadline) {
                    throw new Fatal(what + ": still timing out after " + WAIT_MS + " ms: " + e, e);
                }
                say("retry", "\"call\": " + quote(what) + ", \"error\": " + quote(e));
            } catch (KafkaException e) {
                if (fatal(e)) {
                    throw new Fatal(what + ": " + e, e);
                }
                throw e;
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }
    }

    void commit() throws Fatal {
        Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
        pending.forEach((p, o) -> positions.put(new TopicPartition(input, p), new OffsetAndMetadata(o)));
        long t0 = System.nanoTime();
        call("sendOffsetsToTransaction", () -> {
            producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
            return null;
        });
        long t1 = System.nanoTime();
        call("commitTransaction", () -> {
            producer.commitTransaction();
            return null;
        });
        long t2 = System.nanoTime();
        say("committed", "\"records\": " + records + ", \"offsets\": " + offsets(pending)
            + ", \"send_offsets_ms\": " + (t1 - t0) / 1_000_000 + ", \"commit_ms\": " + (t2 - t1) / 1_000_000);
        inTxn = false;
        pending.clear();
        records = 0;
    }

    void abort(String reason) throws Fatal {
        if (inTxn) {
            call("abortTransaction", () -> {
                producer.abortTransaction();
                return null;
            });
        }
        say("aborted", "\"reason\": " + quote(reason) + ", \"records\": " + records);
        inTxn = false;
        pending.clear();
        records = 0;
    }

    /** Every assigned partition back to the group's committed offset (0 when there is none). */
    void rewind() throws Fatal {
        var assigned = consumer.assignment();
        if (assigned.isEmpty()) {
            return;
        }
        Map<TopicPartition, OffsetAndMetadata> got = call("committed", () -> consumer.committed(assigned));
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata om = got.get(tp);
            consumer.seek(tp, om == null ? 0 : om.offset());
        }
    }

    boolean finished() throws Fatal {
        var tps = new java.util.HashSet<TopicPartition>();
        ends.keySet().forEach(p -> tps.add(new TopicPartition(input, p)));
        Map<TopicPartition, OffsetAndMetadata> got = call("committed", () -> consumer.committed(tps));
        for (var e : ends.entrySet()) {
            OffsetAndMetadata om = got.get(new TopicPartition(input, e.getKey()));
            if (om == null || om.offset() != e.getValue()) {
                return false;
            }
        }
        return true;
    }

    void process(ConsumerRecord<byte[], byte[]> r) throws Exception {
        if (workMs > 0) {
            Thread.sleep(workMs);
        }
        if (!inTxn) {
            producer.beginTransaction();
            inTxn = true;
        }
        byte[] prefix = (r.partition() + ":" + r.offset() + ":").getBytes();
        byte[] value = new byte[prefix.length + r.value().length];
        System.arraycopy(prefix, 0, value, 0, prefix.length);
        System.arraycopy(r.value(), 0, value, prefix.length, r.value().length);
        producer.send(new ProducerRecord<>(output, r.partition(), r.key(), value));
        pending.put(r.partition(), r.offset() + 1);
        records++;
    }

    int run() throws Exception {
        call("initTransactions", () -> {
            producer.initTransactions();
            return null;
        });
        consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
            @Override public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                if (inTxn) {
                    try {
                        abort("partitions revoked: " + partitions);
                    } catch (Fatal e) {
                        throw new KafkaException(e);
                    }
                }
            }
            @Override public void onPartitionsAssigned(Collection<TopicPartition> partitions) { }
        });
        say("started", "");
        while (true) {
            try {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
                if (batch.isEmpty()) {
                    if (inTxn) {
                        commit();               // nothing more came for a while
                    } else if (finished()) {
                        say("done", "");
                        return 0;
                    }
                    continue;
                }
                // The positions after a whole poll: a transaction never ends within a poll's records, so a
                // rewind after an abort never has records of the poll left behind.
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    process(r);
                }
                if (records >= commitEvery) {
                    commit();
                }
            } catch (KafkaException e) {
                if (fatal(e)) {
                    throw new Fatal(String.valueOf(e), e);
                }
                abort(String.valueOf(e));
                rewind();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> spec = new HashMap<>();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq < 0) {
                System.err.println("TxnWorker: argument " + quote(a) + " is not key=value");
                System.exit(2);
            }
            spec.put(a.substring(0, eq), a.substring(eq + 1));
        }
        for (String key : List.of("bootstrap", "input", "output", "ends", "group", "instance", "transactional_id",
                                  "commit_every")) {
            if (!spec.containsKey(key)) {
                System.err.println("TxnWorker: missing " + key + "=...");
                System.exit(2);
            }
        }
        TxnWorker w = new TxnWorker(spec);
        int code;
        try {
            code = w.run();
        } catch (Fatal e) {
            say("fatal", "\"error\": " + quote(e.getMessage()));
            System.exit(3);
            return;
        }
        w.consumer.close();
        w.producer.close(Duration.ofSeconds(10));
        System.exit(code);
    }
}
