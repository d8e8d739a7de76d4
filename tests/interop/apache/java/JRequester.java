// A Java DefaultMQProducer sending requests (request/reply, RocketMQ 4.6+): COUNT requests to
// TOPIC from INFLIGHT threads, each calling the synchronous request(msg, TIMEOUT_MS), so that
// at most INFLIGHT requests wait for their reply at once. A responder is to answer request
// body B with "re:" + B; every reply is checked against its request (body and
// CORRELATION_ID). One JSON line per event on stdout ("ev").
//
// (Not request(msg, callback, timeout): 4.9.7 calls the callback's onSuccess when the request
// is stored, with a null reply if none came yet, and again when the reply comes.)
//
//   JRequester NS TOPIC GROUP COUNT INFLIGHT TIMEOUT_MS
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;

public class JRequester {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], group = a[2];
        int count = Integer.parseInt(a[3]), inflight = Integer.parseInt(a[4]);
        long timeout = Long.parseLong(a[5]);
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(ns);
        p.start();
        JsonOut.emit("{\"ev\":\"ready\",\"clientId\":" + JsonOut.q(p.buildMQClientId()) + "}");
        AtomicInteger next = new AtomicInteger(), matched = new AtomicInteger();
        AtomicInteger mismatched = new AtomicInteger(), failed = new AtomicInteger();
        AtomicInteger inFlight = new AtomicInteger(), maxInFlight = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        ExecutorService pool = Executors.newFixedThreadPool(inflight);
        long start = System.nanoTime();
        for (int t = 0; t < inflight; t++) {
            pool.execute(() -> {
                for (int i = next.getAndIncrement(); i < count; i = next.getAndIncrement()) {
                    String body = "req-" + i;
                    Message m = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
                    maxInFlight.accumulateAndGet(inFlight.incrementAndGet(), Math::max);
                    try {
                        Message reply = p.request(m, timeout);
                        String got = new String(reply.getBody(), StandardCharsets.UTF_8);
                        String cid = reply.getProperty("CORRELATION_ID");
                        if (got.equals("re:" + body) && cid != null
                                && cid.equals(m.getProperty("CORRELATION_ID"))) {
                            matched.incrementAndGet();
                        } else {
                            mismatched.incrementAndGet();
                            firstError.compareAndSet(null, "request " + body + " got " + got);
                        }
                    } catch (Exception e) {
                        failed.incrementAndGet();
                        firstError.compareAndSet(null, body + ": " + e);
                    } finally {
                        inFlight.decrementAndGet();
                    }
                }
            });
        }
        pool.shutdown();
        pool.awaitTermination(1, TimeUnit.HOURS);
        long ms = (System.nanoTime() - start) / 1_000_000;
        JsonOut.emit("{\"ev\":\"done\",\"matched\":" + matched.get() + ",\"mismatched\":"
            + mismatched.get() + ",\"failed\":" + failed.get() + ",\"maxInFlight\":"
            + maxInFlight.get() + ",\"ms\":" + ms + ",\"error\":" + JsonOut.q(firstError.get())
            + "}");
        p.shutdown();
        System.exit(0);
    }
}
