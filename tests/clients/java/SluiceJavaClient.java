// Apache Kafka Java client (kafka-clients 4.x) test program for Sluice's integration
// tests (tests/integration/java_producer_restart.py, client_errors.py). Compiled at
// test time with javac against the kafka-clients jar that tests/reference/kafka-ref.sh
// caches. Producers use the client's defaults (acks=all, idempotent) unless a mode
// says otherwise; consumers use assign() and no group.id.
//
//   create-topic B TOPIC PARTITIONS [key=value ...]   Admin.createTopics
//   produce      B TOPIC COUNT VALUE_SIZE             COUNT keyed records k-%09d, prints
//                                                     "progress ACKED" as acks arrive
//   verify       B TOPIC COUNT                        reads every partition from the
//                                                     beginning; each key exactly once?
//   produce-one  B TOPIC SIZE                          one record of SIZE random bytes
//   fetch-at     B TOPIC PARTITION OFFSET RESET        assign+seek, first record or error
//   describe     B TOPIC                               Admin.describeTopics
//   seek-epoch   B TOPIC PARTITION OFFSET EPOCH RESET  assign+seek to OFFSET as read under leader
//                                                     EPOCH (the consumer validates it with
//                                                     OffsetForLeaderEpoch), first record or error
//
// Output lines are "key value ..." facts; errors a user would see are printed as
// "ERROR <exception class>: <message>" (with the cause chain) and exit 1.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.*;

public class SluiceJavaClient {
    static String describe(Throwable t) {
        if (t instanceof ExecutionException && t.getCause() != null)
            t = t.getCause();
        StringBuilder sb = new StringBuilder(t.getClass().getName() + ": " + t.getMessage());
        for (Throwable c = t.getCause(); c != null && c != c.getCause(); c = c.getCause())
            sb.append(" | caused by ").append(c.getClass().getName()).append(": ").append(c.getMessage());
        return sb.toString();
    }

    static void fail(Throwable t) {
        System.out.println("ERROR " + describe(t));
        System.out.flush();
        System.exit(1);
    }

    static Properties base(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    static Properties producerProps(String bootstrap) {
        Properties p = base(bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return p;
    }

    static Properties consumerProps(String bootstrap) {
        Properties p = base(bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        return p;
    }

    public static void main(String[] a) throws Exception {
        if (a.length < 3) {
            System.err.println("usage: SluiceJavaClient MODE BOOTSTRAP TOPIC ...");
            System.exit(2);
        }
        String mode = a[0], bootstrap = a[1], topic = a[2];
        switch (mode) {
            case "create-topic": createTopic(bootstrap, topic, Integer.parseInt(a[3]), Arrays.copyOfRange(a, 4, a.length)); break;
            case "produce": produce(bootstrap, topic, Long.parseLong(a[3]), Integer.parseInt(a[4])); break;
            case "verify": verify(bootstrap, topic, Long.parseLong(a[3])); break;
            case "produce-one": produceOne(bootstrap, topic, Integer.parseInt(a[3])); break;
            case "fetch-at": fetchAt(bootstrap, topic, Integer.parseInt(a[3]), Long.parseLong(a[4]), a[5]); break;
            case "describe": describeTopic(bootstrap, topic); break;
            case "seek-epoch":
                seekEpoch(bootstrap, topic, Integer.parseInt(a[3]), Long.parseLong(a[4]), Integer.parseInt(a[5]), a[6]);
                break;
            default: System.err.println("unknown mode " + mode); System.exit(2);
        }
        System.out.flush();
        System.exit(0);
    }

    static void createTopic(String bootstrap, String topic, int partitions, String[] configs) {
        Map<String, String> cfg = new HashMap<>();
        for (String kv : configs) {
            int i = kv.indexOf('=');
            cfg.put(kv.substring(0, i), kv.substring(i + 1));
        }
        try (Admin admin = Admin.create(base(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, Optional.of(partitions), Optional.empty()).configs(cfg))).all().get();
            int got = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            System.out.println("created " + topic + " partitions " + got);
        } catch (Exception e) {
            fail(e);
        }
    }

    static byte[] value(long i, int size) {
        byte[] v = new byte[size];
        byte[] head = String.format("v-%09d-", i).getBytes();
        for (int j = 0; j < size; j++)
            v[j] = j < head.length ? head[j] : (byte) ('a' + (i + j) % 26);
        return v;
    }

    static void produce(String bootstrap, String topic, long count, int size) throws Exception {
        AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
        AtomicReference<Exception> firstErr = new AtomicReference<>();
        final long step = Math.max(1, count / 40);
        long t0 = System.nanoTime();
        try (KafkaProducer<String, byte[]> p = new KafkaProducer<>(producerProps(bootstrap))) {
            for (long i = 0; i < count; i++) {
                p.send(new ProducerRecord<>(topic, String.format("k-%09d", i), value(i, size)), (md, e) -> {
                    if (e != null) {
                        failed.incrementAndGet();
                        firstErr.compareAndSet(null, e);
                    } else {
                        long n = acked.incrementAndGet();
                        if (n % step == 0) {
                            System.out.println("progress " + n);
                            System.out.flush();
                        }
                    }
                });
            }
            p.flush();
        }
        System.out.printf("produced acked %d failed %d in %.1fs%n", acked.get(), failed.get(), (System.nanoTime() - t0) / 1e9);
        if (firstErr.get() != null) {
            System.out.println("first error " + describe(firstErr.get()));
            System.exit(1);
        }
    }

    static void verify(String bootstrap, String topic, long count) throws Exception {
        byte[] seen = new byte[(int) count];
        long records = 0, dups = 0, bad = 0, outOfOrder = 0;
        Map<Integer, Long> perPartition = new TreeMap<>();
        Properties props = consumerProps(bootstrap);
        props.put("max.poll.records", "10000");
        try (KafkaConsumer<String, byte[]> c = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30)))
                tps.add(new TopicPartition(topic, pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            Map<TopicPartition, Long> lastIdx = new HashMap<>();
            long deadline = System.currentTimeMillis() + 240_000;
            while (true) {
                boolean doneAll = true;
                for (TopicPartition tp : tps)
                    if (c.position(tp) < end.get(tp))
                        doneAll = false;
                if (doneAll)
                    break;
                if (System.currentTimeMillis() > deadline)
                    throw new RuntimeException("verify timed out after " + records + " records");
                for (ConsumerRecord<String, byte[]> r : c.poll(Duration.ofMillis(500))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    records++;
                    perPartition.merge(r.partition(), 1L, Long::sum);
                    long i;
                    try {
                        i = Long.parseLong(r.key().substring(2));
                    } catch (RuntimeException e) {
                        bad++;
                        continue;
                    }
                    if (i < 0 || i >= count || !Arrays.equals(r.value(), value(i, r.value().length))) {
                        bad++;
                        continue;
                    }
                    Long li = lastIdx.get(tp);
                    if (li != null && i <= li)
                        outOfOrder++;
                    lastIdx.put(tp, i);
                    if (seen[(int) i] != 0)
                        dups++;
                    seen[(int) i] = 1;
                }
            }
            long missing = 0;
            for (byte s : seen)
                if (s == 0)
                    missing++;
            StringBuilder ends = new StringBuilder();
            for (TopicPartition tp : tps)
                ends.append(tp.partition()).append(':').append(end.get(tp)).append(',');
            System.out.printf("verified records %d missing %d duplicated %d bad %d out_of_order %d partitions %d end_offsets %s%n",
                    records, missing, dups, bad, outOfOrder, tps.size(), ends);
        }
    }

    static void produceOne(String bootstrap, String topic, int size) {
        Properties props = producerProps(bootstrap);
        props.put("max.block.ms", "5000");
        props.put("delivery.timeout.ms", "20000");
        props.put("request.timeout.ms", "10000");
        byte[] v = new byte[size];
        new Random().nextBytes(v);
        try (KafkaProducer<String, byte[]> p = new KafkaProducer<>(props)) {
            RecordMetadata md = p.send(new ProducerRecord<>(topic, "k", v)).get();
            System.out.println("OK partition " + md.partition() + " offset " + md.offset());
        } catch (Exception e) {
            fail(e);
        }
    }

    static void fetchAt(String bootstrap, String topic, int partition, long offset, String reset) {
        Properties props = consumerProps(bootstrap);
        props.put("auto.offset.reset", reset);
        try (KafkaConsumer<String, byte[]> c = new KafkaConsumer<>(props)) {
            TopicPartition tp = new TopicPartition(topic, partition);
            c.assign(List.of(tp));
            c.seek(tp, offset);
            long end = c.endOffsets(List.of(tp), Duration.ofSeconds(10)).get(tp);
            long deadline = System.currentTimeMillis() + 15_000;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, byte[]> rs = c.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, byte[]> r : rs) {
                    System.out.println("OK first offset " + r.offset());
                    return;
                }
                if (c.position(tp) >= end)
                    break; // reset to the end: nothing to read
            }
            System.out.println("OK no record position " + c.position(tp));
        } catch (Exception e) {
            fail(e);
        }
    }

    static void seekEpoch(String bootstrap, String topic, int partition, long offset, int epoch, String reset) {
        Properties props = consumerProps(bootstrap);
        props.put("auto.offset.reset", reset);
        try (KafkaConsumer<String, byte[]> c = new KafkaConsumer<>(props)) {
            TopicPartition tp = new TopicPartition(topic, partition);
            c.assign(List.of(tp));
            c.seek(tp, new OffsetAndMetadata(offset, Optional.of(epoch), ""));
            long deadline = System.currentTimeMillis() + 15_000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, byte[]> r : c.poll(Duration.ofMillis(500))) {
                    System.out.println("OK first offset " + r.offset() + " epoch " + r.leaderEpoch().orElse(-1));
                    return;
                }
            }
            System.out.println("OK no record position " + c.position(tp));
        } catch (Exception e) {
            fail(e);
        }
    }

    static void describeTopic(String bootstrap, String topic) {
        try (Admin admin = Admin.create(base(bootstrap))) {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("OK partitions " + d.partitions().size());
        } catch (Exception e) {
            fail(e);
        }
    }
}
