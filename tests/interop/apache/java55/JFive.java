// RocketMQ 5.4/5.5 producer features as a test peer: priority messages and recall of timer
// messages, with the Java client's own API (Message.setPriority, setDeliverTimeMs,
// SendResult.getRecallHandle, DefaultMQProducer.recallMessage).
//
//   JFive priority NAMESRV TOPIC N SEED   send N messages, priority (i * SEED) % 10 for body i;
//                                         prints {"ev":"sent","body","priority","queue"} each
//   JFive recall NAMESRV TOPIC DELAY_MS   send "kept" and "recalled" due in DELAY_MS, recall the
//                                         second at once; prints {"ev":"recalled","msg_id",
//                                         "handle"}, then, once it is due, recalls it again and
//                                         prints {"ev":"late","error"}
//
// Exits 0 when done. Compiled with ../java/JsonOut.java (its line helpers).
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

public class JFive {
    public static void main(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("JFiveProducer");
        p.setNamesrvAddr(a[1]);
        p.start();
        try {
            if (a[0].equals("priority")) {
                priority(p, a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]));
            } else {
                recall(p, a[2], Long.parseLong(a[3]));
            }
        } finally {
            p.shutdown();
        }
        System.exit(0);
    }

    static void priority(DefaultMQProducer p, String topic, int n, int seed) throws Exception {
        for (int i = 0; i < n; i++) {
            int priority = (i * seed) % 10;
            Message m = new Message(topic, ("" + i).getBytes(StandardCharsets.UTF_8));
            m.setPriority(priority);
            SendResult r = p.send(m);
            JsonOut.emit("{\"ev\":\"sent\",\"body\":" + JsonOut.q("" + i) + ",\"priority\":" + priority
                + ",\"queue\":" + r.getMessageQueue().getQueueId() + "}");
        }
    }

    static void recall(DefaultMQProducer p, String topic, long delayMs) throws Exception {
        long due = System.currentTimeMillis() + delayMs;
        Message kept = new Message(topic, "kept".getBytes(StandardCharsets.UTF_8));
        kept.setDeliverTimeMs(due);
        p.send(kept);
        Message doomed = new Message(topic, "recalled".getBytes(StandardCharsets.UTF_8));
        doomed.setDeliverTimeMs(due);
        SendResult r = p.send(doomed);
        String id = p.recallMessage(topic, r.getRecallHandle());
        JsonOut.emit("{\"ev\":\"recalled\",\"msg_id\":" + JsonOut.q(id) + ",\"handle\":"
            + JsonOut.q(r.getRecallHandle()) + "}");
        Thread.sleep(Math.max(0, due - System.currentTimeMillis()) + 1500);
        try {
            p.recallMessage(topic, r.getRecallHandle());
            JsonOut.emit("{\"ev\":\"late\",\"error\":null}");
        } catch (Exception e) {
            JsonOut.emit("{\"ev\":\"late\",\"error\":" + JsonOut.q(String.valueOf(e.getMessage())) + "}");
        }
    }
}
