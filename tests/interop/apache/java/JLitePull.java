// A DefaultLitePullConsumer (Apache RocketMQ 4.9.x or 5.x) in subscribe mode, for the mixed-group
// tests of aiorocket's PullConsumer (tests/interop/apache/test_java_lite_pull_mixed.py).
// One JSON line per event on stdout; the client's own logging is ignored by the test.
//
//   JLitePull NS TOPIC GROUP SECONDS
//
// Events: {"ev":"ready","client_id":...}; {"ev":"msg","queue":Q,"offset":O,"body":B} per
// polled message (printed before the next poll, which acknowledges it); {"ev":"owned",
// "queues":[...]} with the queue ids of TOPIC this member owns, every 100 ms; {"ev":"closed"}
// after a clean shutdown (SIGTERM: commitSync, then shutdown, as a careful application does).
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.impl.consumer.AssignedMessageQueue;
import org.apache.rocketmq.client.impl.consumer.DefaultLitePullConsumerImpl;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class JLitePull {
    static volatile boolean running = true;

    // The shared output helpers of JsonOut, under the short names the calls below use.
    static void emit(String json) {
        JsonOut.emit(json);
    }

    static String q(String s) {
        return JsonOut.q(s);
    }

    // The queues the consumer's rebalance assigned it (4.9 has no public accessor).
    static AssignedMessageQueue assigned(DefaultLitePullConsumer c) throws Exception {
        Field f = DefaultLitePullConsumer.class.getDeclaredField("defaultLitePullConsumerImpl");
        f.setAccessible(true);
        DefaultLitePullConsumerImpl impl = (DefaultLitePullConsumerImpl) f.get(c);
        Field g = DefaultLitePullConsumerImpl.class.getDeclaredField("assignedMessageQueue");
        g.setAccessible(true);
        return (AssignedMessageQueue) g.get(impl);
    }

    // Its queues: 4.9 names the accessor messageQueues(), 5.x getAssignedMessageQueues().
    @SuppressWarnings("unchecked")
    static Collection<MessageQueue> owned(AssignedMessageQueue amq) throws Exception {
        for (String name : new String[] {"messageQueues", "getAssignedMessageQueues"}) {
            try {
                return (Collection<MessageQueue>) AssignedMessageQueue.class.getMethod(name).invoke(amq);
            } catch (NoSuchMethodException e) {
                // the other version's name
            }
        }
        throw new IllegalStateException("AssignedMessageQueue has no accessor of its queues");
    }

    public static void main(String[] a) throws Exception {
        // Rebalance every second, as the Python members do (the default is 20 s).
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");
        String ns = a[0], topic = a[1], group = a[2];
        long deadline = System.currentTimeMillis() + Long.parseLong(a[3]) * 1000;
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAutoCommitIntervalMillis(1000);
        c.setPollTimeoutMillis(100);
        c.subscribe(topic, "*");
        c.start();
        AssignedMessageQueue amq = assigned(c);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            running = false;
            try {
                main.join(20000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        emit("{\"ev\":\"ready\",\"client_id\":" + q(c.buildMQClientId()) + "}");
        long nextOwned = 0;
        while (running && System.currentTimeMillis() < deadline) {
            List<MessageExt> msgs = c.poll();
            for (MessageExt m : msgs) {
                emit("{\"ev\":\"msg\",\"queue\":" + m.getQueueId() + ",\"offset\":" + m.getQueueOffset()
                    + ",\"body\":" + q(new String(m.getBody(), StandardCharsets.UTF_8)) + "}");
            }
            long now = System.currentTimeMillis();
            if (now >= nextOwned) {
                nextOwned = now + 100;
                List<Integer> ids = new ArrayList<>();
                for (MessageQueue mq : owned(amq)) {
                    if (mq.getTopic().equals(topic)) ids.add(mq.getQueueId());
                }
                Collections.sort(ids);
                emit("{\"ev\":\"owned\",\"queues\":" + ids + "}");
            }
        }
        c.commitSync();
        c.shutdown();
        emit("{\"ev\":\"closed\"}");
        if (running) {
            System.exit(0); // the deadline passed (after SIGTERM the JVM is exiting already)
        }
    }
}
