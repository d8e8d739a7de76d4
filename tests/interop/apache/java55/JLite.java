// RocketMQ 5.5's own lite-topic calls (MQClientAPIExt: the client API the 5.5 proxy consumes
// lite topics with; the 5.5 remoting client has no public lite consumer) as a test peer:
// subscribe lite topics, pop and ack their messages, unsubscribe.
//
//   JLite NAMESRV TOPIC GROUP LITE_TOPICS(comma-separated) N TIMEOUT_S
//
// Prints {"ev":"subscribed"} once LITE_SUBSCRIPTION_CTL (PARTIAL_ADD) is answered, then a line
// {"ev":"msg","lite","body","reconsume","offset","ack"} per message popped with
// POP_LITE_MESSAGE and acked with ACK_MESSAGE + liteTopic (its handle from POP_CK, its lite
// topic offset as queue offset), and exits 0 after N messages or TIMEOUT_S seconds, once it
// removed its subscriptions (COMPLETE_REMOVE). Compiled with ../java/JsonOut.java.
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.UUID;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.impl.ClientRemotingProcessor;
import org.apache.rocketmq.client.impl.mqclient.MQClientAPIExt;
import org.apache.rocketmq.common.lite.LiteSubscriptionAction;
import org.apache.rocketmq.common.lite.LiteSubscriptionDTO;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PopLiteMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;

public class JLite {
    public static void main(String[] a) throws Exception {
        if (a.length != 6) {
            System.err.println("usage: JLite NAMESRV TOPIC GROUP LITE_TOPICS N TIMEOUT_S");
            System.exit(2);
        }
        String topic = a[1];
        String group = a[2];
        int n = Integer.parseInt(a[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(a[5]) * 1000;
        ClientConfig config = new ClientConfig();
        config.setNamesrvAddr(a[0]);
        config.setInstanceName("jlite-" + UUID.randomUUID());
        String clientId = config.buildMQClientId();
        MQClientAPIExt api =
            new MQClientAPIExt(config, new NettyClientConfig(), new ClientRemotingProcessor(null), null);
        api.start();
        api.updateNameServerAddressList();
        TopicRouteData route = api.getTopicRouteInfoFromNameServer(topic, 10000);
        BrokerData broker = route.getBrokerDatas().get(0);
        String addr = broker.selectBrokerAddr();
        LiteSubscriptionDTO dto = new LiteSubscriptionDTO()
            .setAction(LiteSubscriptionAction.PARTIAL_ADD)
            .setClientId(clientId)
            .setGroup(group)
            .setTopic(topic)
            .setLiteTopicSet(new HashSet<>(Arrays.asList(a[3].split(","))));
        api.syncLiteSubscriptionAsync(addr, dto, 10000).get();
        JsonOut.emit("{\"ev\":\"subscribed\",\"client\":" + JsonOut.q(clientId) + "}");
        int count = 0;
        while (count < n && System.currentTimeMillis() < deadline) {
            PopLiteMessageRequestHeader pop = new PopLiteMessageRequestHeader();
            pop.setClientId(clientId);
            pop.setConsumerGroup(group);
            pop.setTopic(topic);
            pop.setMaxMsgNum(32);
            pop.setInvisibleTime(30000);
            pop.setPollTime(2000);
            pop.setBornTime(System.currentTimeMillis());
            pop.setAttemptId(UUID.randomUUID().toString());
            PopResult result = api.popLiteMessageAsync(addr, broker.getBrokerName(), pop, 10000).get();
            if (result.getPopStatus() != PopStatus.FOUND) {
                continue;
            }
            for (MessageExt m : result.getMsgFoundList()) {
                AckMessageRequestHeader ack = new AckMessageRequestHeader();
                ack.setConsumerGroup(group);
                ack.setTopic(topic);
                ack.setQueueId(0);
                ack.setExtraInfo(m.getProperty(MessageConst.PROPERTY_POP_CK));
                ack.setOffset(m.getQueueOffset());
                ack.setLiteTopic(m.getProperty(MessageConst.PROPERTY_LITE_TOPIC));
                AckResult acked = api.ackMessageAsync(addr, ack, 10000).get();
                JsonOut.emit("{\"ev\":\"msg\",\"lite\":" + JsonOut.q(m.getProperty(MessageConst.PROPERTY_LITE_TOPIC))
                    + ",\"body\":" + JsonOut.q(new String(m.getBody(), StandardCharsets.UTF_8))
                    + ",\"reconsume\":" + m.getReconsumeTimes() + ",\"offset\":" + m.getQueueOffset()
                    + ",\"ack\":" + JsonOut.q(String.valueOf(acked.getStatus())) + "}");
                count++;
            }
        }
        api.syncLiteSubscriptionAsync(addr, new LiteSubscriptionDTO()
            .setAction(LiteSubscriptionAction.COMPLETE_REMOVE)
            .setClientId(clientId)
            .setGroup(group)
            .setTopic(topic), 10000).get();
        api.shutdown();
        System.exit(0);
    }
}
