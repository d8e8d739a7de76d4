// A RocketMQ 5.x Java push consumer in POP mode as a test peer (client rebalance off: it asks
// the broker for its queues with QUERY_ASSIGNMENT and pops the ones assigned POP, which the
// group's request mode decides: mqadmin setConsumeMode / aiorocket admin set-consume-mode).
//
//   JPop NAMESRV TOPIC GROUP N TIMEOUT_S [THREADS]
//
// Prints {"ev":"ready"} once started, then a line {"ev":"msg","body","reconsume","queue",
// "offset","pop_ck","priority"} per message consumed (CONSUME_SUCCESS, acked by the client), and
// exits 0 after N messages or TIMEOUT_S seconds. THREADS 1 consumes one message at a time in the
// order the pops brought them. Compiled with ../java/JsonOut.java (its line helpers).
import java.nio.charset.StandardCharsets;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class JPop {
    public static void main(String[] a) throws Exception {
        if (a.length != 5 && a.length != 6) {
            System.err.println("usage: JPop NAMESRV TOPIC GROUP N TIMEOUT_S [THREADS]");
            System.exit(2);
        }
        int n = Integer.parseInt(a[3]);
        long timeoutMs = Long.parseLong(a[4]) * 1000;
        AtomicInteger count = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[2]);
        c.setNamesrvAddr(a[0]);
        c.setClientRebalance(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPopInvisibleTime(20000);
        if (a.length == 6) {
            int threads = Integer.parseInt(a[5]);
            c.setConsumeThreadMin(threads);
            c.setConsumeThreadMax(threads);
            c.setConsumeMessageBatchMaxSize(1);
        }
        c.subscribe(a[1], "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                JsonOut.emit("{\"ev\":\"msg\",\"body\":" + JsonOut.q(new String(m.getBody(), StandardCharsets.UTF_8))
                    + ",\"reconsume\":" + m.getReconsumeTimes() + ",\"queue\":" + m.getQueueId()
                    + ",\"offset\":" + m.getQueueOffset() + ",\"pop_ck\":" + JsonOut.q(m.getProperty("POP_CK"))
                    + ",\"priority\":" + JsonOut.q(m.getProperty("_SYS_MSG_PRIORITY_")) + "}");
                if (count.incrementAndGet() >= n) done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        JsonOut.emit("{\"ev\":\"ready\"}");
        done.await(timeoutMs, TimeUnit.MILLISECONDS);
        Thread.sleep(1000);  // the last acks are asynchronous
        c.shutdown();
        System.exit(0);
    }
}
