// A Java responder (request/reply, RocketMQ 4.6+): a DefaultMQPushConsumer of TOPIC answering
// each request body B with "re:" + B through MessageUtil.createReplyMessage and a plain
// DefaultMQProducer.send, as Apache's RequestReply example does. Runs until stopped; one JSON
// line per event on stdout ("ev"): "ready", then "replied" every 100 replies, "error" per
// failed reply.
//
//   JResponder NS TOPIC GROUP
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class JResponder {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], group = a[2];
        DefaultMQProducer replies = new DefaultMQProducer(group + "_replies");
        replies.setNamesrvAddr(ns);
        replies.start();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(32);
        c.setConsumeThreadMax(64);
        c.subscribe(topic, "*");
        AtomicInteger replied = new AtomicInteger();
        c.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(
                    List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt msg : msgs) {
                    String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                    try {
                        Message reply = MessageUtil.createReplyMessage(
                            msg, ("re:" + body).getBytes(StandardCharsets.UTF_8));
                        replies.send(reply, 10000);
                        if (replied.incrementAndGet() % 100 == 0) {
                            JsonOut.emit("{\"ev\":\"replied\",\"n\":" + replied.get() + "}");
                        }
                    } catch (Exception e) {
                        JsonOut.emit("{\"ev\":\"error\",\"body\":" + JsonOut.q(body)
                            + ",\"error\":" + JsonOut.q(e.toString()) + "}");
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        c.start();
        JsonOut.emit("{\"ev\":\"ready\"}");
        Thread.sleep(Long.MAX_VALUE);
    }
}
