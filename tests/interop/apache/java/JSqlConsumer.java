// DefaultMQPushConsumers (Apache RocketMQ 4.9.8) subscribed with MessageSelector.bySql, one
// group per expression, all in one JVM: for the SQL92 interop tests
// (tests/interop/apache/test_java_sql92.py).
//
//   JSqlConsumer NS TOPIC GROUP_PREFIX SECONDS EXPRESSION...
//
// Events: {"ev":"ready","i":I} once consumer I (GROUP_PREFIX + I, EXPRESSION I) started, or
// {"ev":"refused","i":I,"error":...} when its start failed; {"ev":"msg","i":I,"body":B} per
// delivered message; {"ev":"closed"} after the consumers shut down (SECONDS after start, or on
// SIGTERM).
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class JSqlConsumer {
    // The shared output helpers of JsonOut, under the short names the calls below use.
    static void emit(String json) {
        JsonOut.emit(json);
    }

    static String q(String s) {
        return JsonOut.q(s);
    }

    public static void main(String[] a) throws Exception {
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");
        String ns = a[0], topic = a[1], prefix = a[2];
        long seconds = Long.parseLong(a[3]);
        final List<DefaultMQPushConsumer> started = new ArrayList<>();
        for (int k = 4; k < a.length; k++) {
            final int i = k - 4;
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + i);
            c.setNamesrvAddr(ns);
            c.setInstanceName("sql" + i);
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.setPullInterval(0);
            try {
                c.subscribe(topic, MessageSelector.bySql(a[k]));
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        emit("{\"ev\":\"msg\",\"i\":" + i + ",\"body\":"
                            + q(new String(m.getBody(), StandardCharsets.UTF_8)) + "}");
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                started.add(c);
                emit("{\"ev\":\"ready\",\"i\":" + i + "}");
            } catch (Exception e) {
                emit("{\"ev\":\"refused\",\"i\":" + i + ",\"error\":" + q(String.valueOf(e.getMessage())) + "}");
            }
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (DefaultMQPushConsumer c : started) c.shutdown();
            emit("{\"ev\":\"closed\"}");
        }));
        Thread.sleep(seconds * 1000);
        System.exit(0);
    }
}
