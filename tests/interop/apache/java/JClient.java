// The Apache RocketMQ 4.9.8 Java client driven against aiorocket's embedded broker.
// One JSON line per event on stdout, each with an "ev" field; the client's own logging goes
// elsewhere or is ignored by the test (only lines starting with "{" count).
//
//   JClient produce NS TOPIC MODE N [keys=K] [level=L]   MODE: sync oneway orderly batch delay
//   JClient push NS TOPIC GROUP MODE [sleepMs=X] [maxReconsume=N]  MODE: concurrent orderly later
//   JClient lite-sub NS TOPIC GROUP EXPECT
//   JClient lite-assign NS TOPIC GROUP QUEUE SEEK SEEK2 END
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

public class JClient {
    // The shared output helpers of JsonOut, under the short names the calls below use.
    static void emit(String json) {
        JsonOut.emit(json);
    }

    static String q(String s) {
        return JsonOut.q(s);
    }

    static Map<String, String> opts(String[] a, int from) {
        Map<String, String> m = new HashMap<>();
        for (int i = from; i < a.length; i++) {
            int eq = a[i].indexOf('=');
            if (eq > 0) m.put(a[i].substring(0, eq), a[i].substring(eq + 1));
        }
        return m;
    }

    // Message i of a run: what the Python side expects to read back.
    static Message build(String topic, int i, int keys) {
        // every tenth body is over compressMsgBodyOverHowmuch (4 KiB): sent zlib-compressed
        String body = "java-" + i + "-Gr\u00fc\u00dfe-\u2713-" + "x".repeat(i % 40)
            + (i % 10 == 7 ? "z".repeat(5000) : "");
        Message m = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
        m.setTags("t" + (i % 3));
        m.setKeys(Arrays.asList("k" + i, "kb" + i));
        m.putUserProperty("idx", String.valueOf(i));
        m.putUserProperty("okey", String.valueOf(i % keys));
        m.putUserProperty("uni", "\u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u2713 " + i);
        return m;
    }

    static String msgJson(MessageExt m, String extra) {
        return "{\"ev\":\"msg\",\"topic\":" + q(m.getTopic()) + ",\"queue\":" + m.getQueueId()
            + ",\"offset\":" + m.getQueueOffset() + ",\"reconsume\":" + m.getReconsumeTimes()
            + ",\"msg_id\":" + q(m.getMsgId()) + ",\"body\":" + q(new String(m.getBody(), StandardCharsets.UTF_8))
            + ",\"tags\":" + q(m.getTags()) + ",\"keys\":" + q(m.getKeys())
            + ",\"idx\":" + q(m.getUserProperty("idx")) + ",\"okey\":" + q(m.getUserProperty("okey"))
            + ",\"uni\":" + q(m.getUserProperty("uni")) + ",\"ts\":" + System.currentTimeMillis() + extra + "}";
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    public static void main(String[] a) throws Exception {
        // Rebalance every second as the Python consumers do (the default wait is 20 s). The
        // tests shorten the embedded broker's lock lease to 4 s, so orderly members renew their
        // queue locks every second (default 20 s) and stop trusting a lock 3 s after its last
        // renewal (default 30 s), below the lease as on a real deployment (30 s < 60 s).
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");
        System.setProperty("rocketmq.client.rebalance.lockInterval", "1000");
        System.setProperty("rocketmq.client.rebalance.lockMaxLiveTime", "3000");
        switch (a[0]) {
            case "produce": produce(a); break;
            case "push": push(a); break;
            case "lite-sub": liteSub(a); break;
            case "lite-assign": liteAssign(a); break;
            default: throw new IllegalArgumentException("unknown command " + a[0]);
        }
    }

    static void produce(String[] a) throws Exception {
        String ns = a[1], topic = a[2], mode = a[3];
        int n = Integer.parseInt(a[4]);
        Map<String, String> o = opts(a, 5);
        int keys = Integer.parseInt(o.getOrDefault("keys", "8"));
        DefaultMQProducer p = new DefaultMQProducer("JProducer_" + topic);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15000);
        p.start();
        Runtime.getRuntime().addShutdownHook(new Thread(p::shutdown));
        emit("{\"ev\":\"ready\",\"client_id\":" + q(p.buildMQClientId()) + "}");
        if (mode.equals("batch")) {
            for (int first = 0; first < n; first += 10) {
                List<Message> batch = new ArrayList<>();
                for (int i = first; i < Math.min(n, first + 10); i++) batch.add(build(topic, i, keys));
                SendResult r = p.send(batch);
                emit("{\"ev\":\"sent_batch\",\"first\":" + first + ",\"count\":" + batch.size()
                    + ",\"status\":" + q(r.getSendStatus().name()) + ",\"msg_id\":" + q(r.getMsgId())
                    + ",\"offset_msg_id\":" + q(r.getOffsetMsgId()) + ",\"queue\":" + r.getMessageQueue().getQueueId()
                    + ",\"offset\":" + r.getQueueOffset() + "}");
            }
        } else {
            for (int i = 0; i < n; i++) {
                Message m = build(topic, i, keys);
                if (mode.equals("oneway")) {
                    p.sendOneway(m);
                    emit("{\"ev\":\"sent\",\"i\":" + i + "}");
                    continue;
                }
                if (mode.equals("delay")) m.setDelayTimeLevel(Integer.parseInt(o.getOrDefault("level", "2")));
                SendResult r = mode.equals("orderly")
                    ? p.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), i % keys)
                    : p.send(m);
                emit("{\"ev\":\"sent\",\"i\":" + i + ",\"status\":" + q(r.getSendStatus().name())
                    + ",\"msg_id\":" + q(r.getMsgId()) + ",\"offset_msg_id\":" + q(r.getOffsetMsgId())
                    + ",\"queue\":" + r.getMessageQueue().getQueueId() + ",\"offset\":" + r.getQueueOffset()
                    + ",\"born\":" + System.currentTimeMillis() + "}");
            }
        }
        emit("{\"ev\":\"done\",\"count\":" + n + "}");
        p.shutdown();
        System.exit(0);
    }

    // Held queues of a push consumer (its rebalance's process queues that are not dropped),
    // as "queues" events whenever they change; for orderly members also which are locked.
    static void watchQueues(DefaultMQPushConsumer c, String topic) {
        Thread t = new Thread(() -> {
            String last = "";
            while (true) {
                TreeSet<Integer> held = new TreeSet<>(), locked = new TreeSet<>();
                for (Map.Entry<MessageQueue, ProcessQueue> e
                    : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
                    if (!e.getKey().getTopic().equals(topic) || e.getValue().isDropped()) continue;
                    held.add(e.getKey().getQueueId());
                    if (e.getValue().isLocked()) locked.add(e.getKey().getQueueId());
                }
                String now = "{\"ev\":\"queues\",\"queues\":" + held + ",\"locked\":" + locked + "}";
                if (!now.equals(last)) {
                    emit(now);
                    last = now;
                }
                sleep(100);
            }
        }, "queue-watch");
        t.setDaemon(true);
        t.start();
    }

    static void push(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3], mode = a[4];
        Map<String, String> o = opts(a, 5);
        long sleepMs = Long.parseLong(o.getOrDefault("sleepMs", "0"));
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(500);
        c.setHeartbeatBrokerInterval(2000);
        if (o.containsKey("maxReconsume")) c.setMaxReconsumeTimes(Integer.parseInt(o.get("maxReconsume")));
        c.subscribe(topic, "*");
        if (mode.equals("orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    emit(msgJson(m, ""));
                    sleep(sleepMs);
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            boolean later = mode.equals("later");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    emit(msgJson(m, ",\"retry_topic\":" + q(m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC))));
                    sleep(sleepMs);
                }
                return later ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        // SIGTERM is a clean leave: shutdown persists offsets, unlocks and unregisters.
        Runtime.getRuntime().addShutdownHook(new Thread(c::shutdown));
        emit("{\"ev\":\"ready\",\"client_id\":" + q(c.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId()) + "}");
        watchQueues(c, topic);
        new CountDownLatch(1).await();
    }

    static void liteSub(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        int expect = Integer.parseInt(a[4]);
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // commitSync() only moves the in-memory offsets; the client instance's persist task
        // sends them to the broker (UPDATE_CONSUMER_OFFSET) every persistConsumerOffsetInterval.
        c.setAutoCommit(false);
        c.setPersistConsumerOffsetInterval(500);
        c.subscribe(topic, "*");
        c.start();
        Runtime.getRuntime().addShutdownHook(new Thread(c::shutdown));
        emit("{\"ev\":\"ready\"}");
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + 60000;
        while (seen.size() < expect && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(500)) {
                seen.add(m.getMsgId());
                emit(msgJson(m, ""));
            }
        }
        c.commitSync();
        List<Integer> ids = new ArrayList<>();
        for (MessageQueue mq : c.assignment()) ids.add(mq.getQueueId());
        Collections.sort(ids);
        emit("{\"ev\":\"committed\",\"count\":" + seen.size() + ",\"queues\":" + ids + "}");
        new CountDownLatch(1).await();
    }

    static void pollUntil(DefaultLitePullConsumer c, long end, int phase) {
        long last = -1, deadline = System.currentTimeMillis() + 60000;
        while (last < end - 1 && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(500)) {
                last = Math.max(last, m.getQueueOffset());
                emit(msgJson(m, ",\"phase\":" + phase));
            }
        }
    }

    static void liteAssign(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        int queue = Integer.parseInt(a[4]);
        long seek = Long.parseLong(a[5]), seek2 = Long.parseLong(a[6]), end = Long.parseLong(a[7]);
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setAutoCommit(false);
        c.start();
        Runtime.getRuntime().addShutdownHook(new Thread(c::shutdown));
        MessageQueue mq = null;
        List<Integer> all = new ArrayList<>();
        for (MessageQueue m : c.fetchMessageQueues(topic)) {
            all.add(m.getQueueId());
            if (m.getQueueId() == queue) mq = m;
        }
        Collections.sort(all);
        emit("{\"ev\":\"ready\",\"queues\":" + all + "}");
        c.assign(Collections.singletonList(mq));
        c.seek(mq, seek);
        pollUntil(c, end, 1);
        // commitSync(offsets, persist=true) sends the offset to the broker at once.
        c.commitSync(Collections.singletonMap(mq, end), true);
        emit("{\"ev\":\"committed\",\"offset\":" + end + "}");
        c.seek(mq, seek2);
        pollUntil(c, end, 2);
        // committed() reads the group's offset back from the broker (QUERY_CONSUMER_OFFSET).
        emit("{\"ev\":\"done\",\"committed\":" + c.committed(mq) + "}");
        new CountDownLatch(1).await();
    }
}
