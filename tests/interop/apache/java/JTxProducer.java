// A Java 4.9.8 TransactionMQProducer for aiorocket's embedded broker. One JSON line per event
// on stdout ("ev" field); the client's own logging is ignored by the test (only lines starting
// with "{" count).
//
//   JTxProducer NS TOPIC GROUP WAIT_SECONDS BODY...
//
// Each BODY is sent with sendMessageInTransaction; its prefix decides the local transaction:
// "commit-..." COMMIT_MESSAGE, "rollback-..." ROLLBACK_MESSAGE, "unknown-..." UNKNOW (the
// broker must check back). checkLocalTransaction answers COMMIT_MESSAGE and prints a "check"
// event. The program exits once every unknown body was checked, or after WAIT_SECONDS.
import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class JTxProducer {
    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static LocalTransactionState stateOf(String body) {
        if (body.startsWith("commit")) return LocalTransactionState.COMMIT_MESSAGE;
        if (body.startsWith("rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
        return LocalTransactionState.UNKNOW;
    }

    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], group = a[2];
        long waitMs = Long.parseLong(a[3]) * 1000L;
        Set<String> checked = ConcurrentHashMap.newKeySet();
        TransactionMQProducer p = new TransactionMQProducer(group);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15000);
        // route and heartbeat requests too: a JVM starting on a loaded 2-core machine is slow
        p.setMqClientApiTimeout(15000);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return stateOf(new String(msg.getBody(), StandardCharsets.UTF_8));
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                checked.add(body);
                emit("{\"ev\":\"check\",\"body\":\"" + body + "\",\"topic\":\"" + msg.getTopic()
                    + "\",\"txId\":\"" + msg.getTransactionId() + "\"}");
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        emit("{\"ev\":\"ready\"}");
        int unknown = 0;
        for (int i = 4; i < a.length; i++) {
            String body = a[i];
            if (stateOf(body) == LocalTransactionState.UNKNOW) unknown++;
            Message m = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
            TransactionSendResult r = p.sendMessageInTransaction(m, null);
            emit("{\"ev\":\"sent\",\"body\":\"" + body + "\",\"status\":\"" + r.getSendStatus().name()
                + "\",\"state\":\"" + r.getLocalTransactionState().name() + "\",\"msgId\":\""
                + r.getMsgId() + "\",\"queue\":" + r.getMessageQueue().getQueueId() + "}");
        }
        long deadline = System.currentTimeMillis() + waitMs;
        while (checked.size() < unknown && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        Thread.sleep(1000); // the check's END_TRANSACTION is sent after the listener returns
        emit("{\"ev\":\"done\",\"checked\":" + checked.size() + "}");
        p.shutdown();
        System.exit(0);
    }
}
