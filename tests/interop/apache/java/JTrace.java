// Java clients with message trace on (enableMsgTrace=true), for tests/interop/apache/
// test_java_trace.py. One JSON line per event on stdout (only lines starting with "{" count).
//
//   JTrace produce NS TOPIC N             sends N messages (keys k<i> and kb<i>, tag t<i%3>)
//   JTrace consume NS TOPIC GROUP N       consumes until N messages succeeded; the first
//                                         delivery of every message whose body ends in "fail"
//                                         answers RECONSUME_LATER
// Both shut down at the end (which flushes the trace dispatcher) and print "done".
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

public class JTrace {
    public static void main(String[] a) throws Exception {
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");
        switch (a[0]) {
            case "produce": produce(a); break;
            case "consume": consume(a); break;
            default: throw new IllegalArgumentException("unknown command " + a[0]);
        }
    }

    static void produce(String[] a) throws Exception {
        String ns = a[1], topic = a[2];
        int n = Integer.parseInt(a[3]);
        DefaultMQProducer p = new DefaultMQProducer("JTraceProducer", true, null);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15000);
        p.start();
        JsonOut.emit("{\"ev\":\"ready\"}");
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, ("trace-" + i).getBytes(StandardCharsets.UTF_8));
            m.setTags("t" + (i % 3));
            m.setKeys(Arrays.asList("k" + i, "kb" + i));
            SendResult r = p.send(m);
            JsonOut.emit("{\"ev\":\"sent\",\"i\":" + i + ",\"msg_id\":" + JsonOut.q(r.getMsgId())
                + ",\"offset_msg_id\":" + JsonOut.q(r.getOffsetMsgId()) + "}");
        }
        // shutdown() hands the last trace batch to an executor and closes the trace producer
        // without waiting for its asynchronous send (4.9.x AsyncTraceDispatcher.flush), so a
        // Pub record can be lost; the dispatcher sends a batch within 500 ms.
        Thread.sleep(1500);
        p.shutdown();
        JsonOut.emit("{\"ev\":\"done\"}");
        System.exit(0);
    }

    static void consume(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        int n = Integer.parseInt(a[4]);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, true, null);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        AtomicInteger ok = new AtomicInteger();
        Object lock = new Object();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            MessageExt m = msgs.get(0);
            String body = new String(m.getBody(), StandardCharsets.UTF_8);
            boolean fail = body.endsWith("fail") && m.getReconsumeTimes() == 0;
            JsonOut.emit("{\"ev\":\"msg\",\"msg_id\":" + JsonOut.q(m.getMsgId()) + ",\"reconsume\":"
                + m.getReconsumeTimes() + ",\"fail\":" + fail + "}");
            if (fail) return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            if (ok.incrementAndGet() >= n) {
                synchronized (lock) {
                    lock.notifyAll();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        JsonOut.emit("{\"ev\":\"ready\"}");
        synchronized (lock) {
            while (ok.get() < n) lock.wait(500);
        }
        Thread.sleep(500);  // the last SubAfter is appended after the listener returns
        c.shutdown();
        JsonOut.emit("{\"ev\":\"done\"}");
        System.exit(0);
    }
}
