// The Java 4.9.8 client as a benchmark peer; prints one JSON line with its figures.
//   JBench drain NAMESRV TOPIC GROUP N TIMEOUT_S BATCH THREADS
//       DefaultMQPushConsumer, no-op concurrent listener, consumeMessageBatchMaxSize=BATCH,
//       THREADS consume threads (20 is the Java default), from the first offset.
//   JBench produce NAMESRV TOPIC SECONDS SIZE
//       DefaultMQProducer, a sync send loop (one in flight) for SECONDS after 2,000 warm-up sends.
//   JBench rate NAMESRV TOPIC RATE SECONDS
//       DefaultMQProducer with its default retries and timeout, sync sends at RATE a second for
//       SECONDS; the wall-clock time (ms) of every failed send and of every acknowledged one.
// CPU is this process's CPU time (OperatingSystemMXBean); "first_last" figures run from the first
// to the last message, so JVM start-up is left out of them.
import java.lang.management.ManagementFactory;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

public class JBench {
    static double cpu() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime() / 1e9;
    }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("drain")) drain(a);
        else if (a[0].equals("rate")) rate(a);
        else produce(a);
        System.exit(0);
    }

    static void drain(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        long n = Long.parseLong(a[4]); long timeout = Long.parseLong(a[5]) * 1000;
        int batch = Integer.parseInt(a[6]), threads = Integer.parseInt(a[7]);
        AtomicLong count = new AtomicLong();
        // first/last message: wall time and CPU, set by the listener threads
        long[] first = new long[1]; double[] firstCpu = new double[1];
        AtomicBoolean started = new AtomicBoolean();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(batch);
        c.setConsumeThreadMin(threads); c.setConsumeThreadMax(threads);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            if (started.compareAndSet(false, true)) { first[0] = System.nanoTime(); firstCpu[0] = cpu(); }
            if (count.addAndGet(msgs.size()) >= n) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long t0 = System.nanoTime(); double c0 = cpu();
        c.start();
        boolean ok = done.await(timeout, TimeUnit.MILLISECONDS);
        long t1 = System.nanoTime(); double c1 = cpu();
        System.out.println("{\"ok\":" + ok + ",\"count\":" + count.get()
            + ",\"seconds\":" + (t1 - t0) / 1e9 + ",\"cpu\":" + (c1 - c0)
            + ",\"seconds_first_to_last\":" + (t1 - first[0]) / 1e9
            + ",\"cpu_first_to_last\":" + (c1 - firstCpu[0]) + "}");
        c.shutdown();
    }

    static void produce(String[] a) throws Exception {
        String ns = a[1], topic = a[2]; double seconds = Double.parseDouble(a[3]);
        byte[] body = new byte[Integer.parseInt(a[4])];
        java.util.Arrays.fill(body, (byte) 'x');
        DefaultMQProducer p = new DefaultMQProducer("JBenchProducer");
        p.setNamesrvAddr(ns);
        p.start();
        for (int i = 0; i < 2000; i++) p.send(new Message(topic, body));
        long n = 0; long t0 = System.nanoTime(); double c0 = cpu();
        long end = t0 + (long) (seconds * 1e9);
        while (System.nanoTime() < end) { p.send(new Message(topic, body)); n++; }
        long t1 = System.nanoTime(); double c1 = cpu();
        System.out.println("{\"ok\":true,\"count\":" + n + ",\"seconds\":" + (t1 - t0) / 1e9
            + ",\"cpu\":" + (c1 - c0) + "}");
        p.shutdown();
    }

    static void rate(String[] a) throws Exception {
        String ns = a[1], topic = a[2];
        double rate = Double.parseDouble(a[3]), seconds = Double.parseDouble(a[4]);
        DefaultMQProducer p = new DefaultMQProducer("JBenchRate");
        p.setNamesrvAddr(ns);
        p.start();
        StringBuilder ok = new StringBuilder(), failed = new StringBuilder();
        long start = System.nanoTime();
        for (long i = 0; System.nanoTime() - start < (long) (seconds * 1e9); i++) {
            try {
                p.send(new Message(topic, ("j" + i).getBytes()));
                ok.append(ok.length() == 0 ? "" : ",").append(System.currentTimeMillis());
            } catch (Exception e) {
                failed.append(failed.length() == 0 ? "" : ",").append(System.currentTimeMillis());
            }
            long ahead = start + (long) ((i + 1) / rate * 1e9) - System.nanoTime();
            if (ahead > 0) Thread.sleep(ahead / 1000000, (int) (ahead % 1000000));
        }
        System.out.println("{\"ok\":true,\"acked\":[" + ok + "],\"failed\":[" + failed + "]}");
        p.shutdown();
    }
}
