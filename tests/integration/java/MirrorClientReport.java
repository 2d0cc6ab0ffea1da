// What MirrorMaker 2's own client library reads on a target cluster: the upstream clusters and
// their hops (from heartbeat topics), the remote topics, and a consumer group's translated
// offsets (from <source>.checkpoints.internal), through MirrorClient and RemoteClusterUtils.
// Run by the integration tests as a single-file Java program on Apache Kafka's jars:
//   java -cp 'libs/*' MirrorClientReport.java <target bootstrap> <source alias> <group>
// One line per fact, sorted, so the test compares text.

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class MirrorClientReport {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], source = args[1], group = args[2];
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", bootstrap);
        Duration timeout = Duration.ofSeconds(30);
        try (MirrorClient client = new MirrorClient(props)) {
            System.out.println("upstream " + new TreeSet<>(client.upstreamClusters()));
            System.out.println("hops " + client.replicationHops(source));
            System.out.println("remote-topics " + new TreeSet<>(client.remoteTopics(source)));
            print("checkpoint", client.remoteConsumerOffsets(group, source, timeout));
        }
        print("translated", RemoteClusterUtils.translateOffsets(props, source, group, timeout));
    }

    private static void print(String what, Map<TopicPartition, OffsetAndMetadata> offsets) {
        TreeSet<String> lines = new TreeSet<>();
        offsets.forEach((tp, at) -> lines.add(
            what + " " + tp.topic() + " " + String.format("%03d", tp.partition()) + " " + at.offset()));
        lines.forEach(System.out::println);
    }
}
