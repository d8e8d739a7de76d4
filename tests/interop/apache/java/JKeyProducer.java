// A Java 4.9.8 producer of keyed, ordered messages for aiorocket's consumers ordering by key
//. One JSON line per event on stdout ("ev" field); the client's own logging is
// ignored by the test (only lines starting with "{" count).
//
//   JKeyProducer NS TOPIC KEYS PER_KEY MODE
//
// Message n of key k (k0, k1, ...) has the body "k:n" and goes to the queue the stock
// orderly selector SelectMessageQueueByHash picks for the key; keys take turns, so a queue
// interleaves its keys. MODE "property" also sets the user property __SHARDINGKEY to the key
// (RocketMQ 5.x's message group, MessageConst.PROPERTY_SHARDING_KEY; 4.9.8 has no constant
// for it and lets it through as a user property); MODE "selector" leaves it out and puts the
// key in the message KEYS only.
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.selector.SelectMessageQueueByHash;
import org.apache.rocketmq.common.message.Message;

public class JKeyProducer {
    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], mode = a[4];
        int keys = Integer.parseInt(a[2]), perKey = Integer.parseInt(a[3]);
        if (!mode.equals("property") && !mode.equals("selector")) {
            throw new IllegalArgumentException("MODE is property or selector, not " + mode);
        }
        DefaultMQProducer p = new DefaultMQProducer("JKeyProducer_" + topic);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15000);
        p.start();
        emit("{\"ev\":\"ready\"}");
        SelectMessageQueueByHash byHash = new SelectMessageQueueByHash();
        for (int n = 0; n < perKey; n++) {
            for (int k = 0; k < keys; k++) {
                String key = "k" + k;
                Message m = new Message(topic, (key + ":" + n).getBytes(StandardCharsets.UTF_8));
                m.setKeys(key);
                if (mode.equals("property")) m.putUserProperty("__SHARDINGKEY", key);
                SendResult r = p.send(m, byHash, key);
                emit("{\"ev\":\"sent\",\"key\":\"" + key + "\",\"n\":" + n + ",\"queue\":"
                    + r.getMessageQueue().getQueueId() + ",\"offset\":" + r.getQueueOffset()
                    + ",\"status\":\"" + r.getSendStatus().name() + "\"}");
            }
        }
        emit("{\"ev\":\"done\",\"count\":" + (keys * perKey) + "}");
        p.shutdown();
        System.exit(0);
    }
}
