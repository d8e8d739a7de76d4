// A Java push consumer as a test peer, printing every message it consumes as a JSON line.
//
//   Peer consume NAMESRV TOPIC GROUP N TIMEOUT_S
//
// Consumes TOPIC from the first offset in GROUP (concurrently, CONSUME_SUCCESS) until it has
// seen N distinct message ids or TIMEOUT_S seconds passed, then shuts down (unregistering from
// the group) and exits 0. Every message is a line {"ev":"msg", "topic", "body", "tags", "keys",
// "queue", "offset", "msg_id", "reconsume", "idx" (the user property), "sys_flag", "props"},
// non-ASCII text as JSON escapes so the line reads the same whatever the JVM's locale; "ready"
// once the consumer has started. Lines are written with JClient's helpers (compiled together).
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class Peer {
    static String json(Map<String, String> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, String> e : new TreeMap<>(m).entrySet()) {
            if (b.length() > 1) b.append(',');
            b.append(JClient.q(e.getKey())).append(':').append(JClient.q(e.getValue()));
        }
        return b.append('}').toString();
    }

    public static void main(String[] a) throws Exception {
        if (a.length != 6 || !a[0].equals("consume")) {
            System.err.println("usage: Peer consume NAMESRV TOPIC GROUP N TIMEOUT_S");
            System.exit(2);
        }
        String ns = a[1], topic = a[2], group = a[3];
        int n = Integer.parseInt(a[4]);
        long timeoutMs = Long.parseLong(a[5]) * 1000;
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                JClient.emit("{\"ev\":\"msg\",\"topic\":" + JClient.q(m.getTopic())
                    + ",\"body\":" + JClient.q(new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8))
                    + ",\"tags\":" + JClient.q(m.getTags()) + ",\"keys\":" + JClient.q(m.getKeys())
                    + ",\"queue\":" + m.getQueueId() + ",\"offset\":" + m.getQueueOffset()
                    + ",\"msg_id\":" + JClient.q(m.getMsgId()) + ",\"reconsume\":" + m.getReconsumeTimes()
                    + ",\"idx\":" + JClient.q(m.getUserProperty("idx")) + ",\"sys_flag\":" + m.getSysFlag()
                    + ",\"props\":" + json(m.getProperties()) + "}");
                seen.add(m.getMsgId());
            }
            if (seen.size() >= n) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        JClient.emit("{\"ev\":\"ready\"}");
        done.await(timeoutMs, TimeUnit.MILLISECONDS);
        c.shutdown();
        System.exit(0);
    }
}
