/*
 * Produce latency measured by Kafka's own Java producer (kafka-clients), as the OpenMessaging Benchmark's Kafka
 * driver measures it: per record, the time its send callback ran minus the time send() was called
 * (System.nanoTime), for benchmarks/java_latency.py:
 *
 *   java -cp CLASSES:JARS ProduceLatency BOOTSTRAP
 *
 * stdin carries one command per line, stdout answers each with one JSON line:
 *
 *   peak TOPIC ACKS RECORDS VALUE_BYTES [KEY=VALUE ...]       RECORDS records as fast as send() takes them
 *   paced TOPIC ACKS RATE SECONDS VALUE_BYTES [KEY=VALUE ...]  RATE * SECONDS records, sent at RATE records/s
 *
 * Each command makes a new KafkaProducer<byte[], byte[]> with the client's defaults plus bootstrap.servers, acks,
 * the byte-array serializers and the command's KEY=VALUE producer settings (none in the benchmark's rows), sends
 * one warm-up record and waits for it (connection and metadata up, not counted: it is offset 0 of the fresh topic),
 * then sends the records (12-byte keys, VALUE_BYTES random values from a pool of 1,000) to partition 0, flushes and
 * closes. The answer: the records, the errors (with the first one's
 * message), whether the callbacks' offsets are exactly 1..RECORDS, the wall time from the first send() to the last
 * callback, the send rate achieved, and p50 / p99 / p99.9 / max of the latencies in ms. The client's own log goes to
 * stderr; a command that cannot run answers {"error": ...}.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class ProduceLatency {
    private static final int POOL = 1_000;
    private static final long MAX_PARK_NS = 1_000_000L;      // the pacing loop sleeps at most 1 ms at a time

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: ProduceLatency BOOTSTRAP");
            System.exit(2);
        }
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            if (w.length == 0 || w[0].isEmpty()) continue;
            if (w[0].equals("exit")) break;
            String answer;
            try {
                if (w[0].equals("peak") && w.length >= 5) {
                    answer = run(args[0], w[1], w[2], Long.parseLong(w[3]), 0.0, Integer.parseInt(w[4]),
                            settings(w, 5));
                } else if (w[0].equals("paced") && w.length >= 6) {
                    double rate = Double.parseDouble(w[3]);
                    long count = Math.max(1L, (long) (rate * Double.parseDouble(w[4])));
                    answer = run(args[0], w[1], w[2], count, rate, Integer.parseInt(w[5]), settings(w, 6));
                } else {
                    answer = "{\"error\": \"unknown command: " + escape(line) + "\"}";
                }
            } catch (Throwable t) {
                t.printStackTrace();
                answer = "{\"error\": \"" + escape(t.toString()) + "\"}";
            }
            out.println(answer);
        }
    }

    /** The KEY=VALUE producer settings of a command, from word {@code from} on. */
    private static Properties settings(String[] words, int from) {
        Properties extra = new Properties();
        for (int i = from; i < words.length; i++) {
            int eq = words[i].indexOf('=');
            if (eq <= 0) throw new IllegalArgumentException("a producer setting is KEY=VALUE, got " + words[i]);
            extra.put(words[i].substring(0, eq), words[i].substring(eq + 1));
        }
        return extra;
    }

    /** Send {@code count} records to {@code topic}-0, paced at {@code rate} records/s (0: unpaced). */
    private static String run(String bootstrap, String topic, String acks, long count, double rate, int valueBytes,
                              Properties extra) throws Exception {
        if (count > Integer.MAX_VALUE) throw new IllegalArgumentException("too many records: " + count);
        int n = (int) count;
        Random random = new Random(30 + valueBytes);
        byte[][] keys = new byte[POOL][];
        byte[][] values = new byte[POOL][];
        for (int i = 0; i < POOL; i++) {
            keys[i] = String.format(Locale.ROOT, "key-%08d", i).getBytes(StandardCharsets.US_ASCII);
            values[i] = new byte[valueBytes];
            random.nextBytes(values[i]);
        }
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, acks);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "bench-wire-java");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.putAll(extra);
        long[] sentAt = new long[n];
        long[] doneAt = new long[n];
        long[] offsets = new long[n];
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        long start;
        long lastSend;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.send(new ProducerRecord<>(topic, 0, null, "warm-up".getBytes(StandardCharsets.US_ASCII)))
                    .get(60, TimeUnit.SECONDS);
            start = System.nanoTime();
            int i = 0;
            while (i < n) {
                int due = rate <= 0 ? n : (int) Math.min(n, (long) ((System.nanoTime() - start) * rate / 1e9) + 1);
                while (i < due) {
                    final int k = i;
                    sentAt[k] = System.nanoTime();
                    producer.send(new ProducerRecord<>(topic, 0, keys[k % POOL], values[k % POOL]), (md, ex) -> {
                        doneAt[k] = System.nanoTime();
                        if (ex != null) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, ex.toString());
                            offsets[k] = -1;
                        } else {
                            offsets[k] = md.offset();
                        }
                    });
                    i++;
                }
                if (i < n) {
                    long wait = start + (long) (i * 1e9 / rate) - System.nanoTime();
                    if (wait > 0) LockSupport.parkNanos(Math.min(wait, MAX_PARK_NS));
                }
            }
            lastSend = System.nanoTime();
            producer.flush();          // every callback has run when flush returns
        }
        long lastDone = start;
        double[] ms = new double[n];
        boolean[] seen = new boolean[n + 1];
        boolean offsetsExact = true;
        for (int k = 0; k < n; k++) {
            lastDone = Math.max(lastDone, doneAt[k]);
            ms[k] = (doneAt[k] - sentAt[k]) / 1e6;
            long o = offsets[k];
            if (o < 1 || o > n || seen[(int) o]) offsetsExact = false;
            else seen[(int) o] = true;
        }
        Arrays.sort(ms);
        double wall = (lastDone - start) / 1e9;
        double sendWall = Math.max(1e-9, (lastSend - start) / 1e9);
        String err = firstError.get();
        return String.format(Locale.ROOT,
                "{\"records\": %d, \"errors\": %d, \"first_error\": %s, \"offsets_exact\": %b, \"wall_s\": %.6f, "
                        + "\"records_per_s\": %.1f, \"target_records_per_s\": %s, \"achieved_records_per_s\": %.1f, "
                        + "\"p50_ms\": %.4f, \"p99_ms\": %.4f, \"p999_ms\": %.4f, \"max_ms\": %.4f, "
                        + "\"client_version\": \"%s\"}",
                n, errors.get(), err == null ? "null" : "\"" + escape(err) + "\"", offsetsExact, wall, n / wall,
                Double.toString(rate), n / sendWall, percentile(ms, 0.50), percentile(ms, 0.99),
                percentile(ms, 0.999), ms[n - 1],
                escape(AppInfoParser.getVersion()));
    }

    /** The value at rank round(q * (n - 1)) of the sorted values, as benchmarks/wire_latency.py computes it. */
    private static double percentile(double[] sorted, double q) {
        int rank = (int) Math.round(q * (sorted.length - 1));
        return sorted[Math.min(sorted.length - 1, Math.max(0, rank))];
    }

    private static String escape(String s) {
        StringBuilder b = new StringBuilder();
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
            else b.append(c);
        }
        return b.toString();
    }
}
