/*
 * The Admin API's commands of Driver.java (topics, configs, records, offsets, log dirs, ACLs here; groups,
 * transactions, the cluster and the unserved APIs in AdminGroupOps.java): each takes {"op": <Admin method name>,
 * "client": <admin name, default "admin">, ...arguments} and answers plain JSON of the result (partitions are
 * "topic:partition" strings, authorized operations sorted AclOperation names, absent optionals null). The
 * arguments of each op are read below; the tests (tests/server/test_java_*.py) show them in use.
 */

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

@SuppressWarnings({"unchecked", "deprecation"})
public final class AdminOps {
    final Clients clients;
    final AdminGroupOps groups = new AdminGroupOps();

    AdminOps(Clients clients) { this.clients = clients; }

    static String name(TopicPartition tp) { return Clients.name(tp); }

    static TopicPartition tp(Object s) { return Clients.tp((String) s); }

    static List<String> strings(Object o) { return o == null ? List.of() : (List<String>) o; }

    static int num(Map<String, Object> cmd, String key, long dflt) {
        return ((Number) cmd.getOrDefault(key, dflt)).intValue();
    }

    static Set<String> ops(Set<AclOperation> ops) {
        if (ops == null) return null;
        Set<String> out = new TreeSet<>();
        for (AclOperation o : ops) out.add(o.name());
        return out;
    }

    static Object node(Node n) {
        if (n == null) return null;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", n.id());
        m.put("host", n.host());
        m.put("port", n.port());
        m.put("rack", n.rack());
        return m;
    }

    static Object optLong(OptionalLong o) { return o.isPresent() ? o.getAsLong() : null; }

    static Object optInt(OptionalInt o) { return o.isPresent() ? o.getAsInt() : null; }

    static ConfigResource resource(Map<String, Object> cmd) {
        return new ConfigResource(ConfigResource.Type.valueOf(((String) cmd.getOrDefault("type", "TOPIC"))),
                (String) cmd.get("resource"));
    }

    static Map<String, Object> config(Config c) {
        Map<String, Object> out = new TreeMap<>();
        for (ConfigEntry e : c.entries()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("value", e.value());
            m.put("source", e.source().name());
            m.put("read_only", e.isReadOnly());
            m.put("sensitive", e.isSensitive());
            out.put(e.name(), m);
        }
        return out;
    }

    static AclBinding binding(Map<String, Object> a) {
        return new AclBinding(
                new ResourcePattern(ResourceType.valueOf((String) a.get("resource_type")), (String) a.get("name"),
                        PatternType.valueOf((String) a.getOrDefault("pattern", "LITERAL"))),
                new AccessControlEntry((String) a.get("principal"), (String) a.getOrDefault("host", "*"),
                        AclOperation.valueOf((String) a.get("operation")),
                        AclPermissionType.valueOf((String) a.getOrDefault("permission", "ALLOW"))));
    }

    static AclBindingFilter filter(Map<String, Object> a) {
        return new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.valueOf((String) a.getOrDefault("resource_type", "ANY")),
                        (String) a.get("name"), PatternType.valueOf((String) a.getOrDefault("pattern", "ANY"))),
                new AccessControlEntryFilter((String) a.get("principal"), (String) a.get("host"),
                        AclOperation.valueOf((String) a.getOrDefault("operation", "ANY")),
                        AclPermissionType.valueOf((String) a.getOrDefault("permission", "ANY"))));
    }

    static Map<String, Object> acl(AclBinding b) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("resource_type", b.pattern().resourceType().name());
        m.put("name", b.pattern().name());
        m.put("pattern", b.pattern().patternType().name());
        m.put("principal", b.entry().principal());
        m.put("host", b.entry().host());
        m.put("operation", b.entry().operation().name());
        m.put("permission", b.entry().permissionType().name());
        return m;
    }

    static List<Object> acls(Collection<AclBinding> bindings) {
        List<Object> out = new ArrayList<>();
        for (AclBinding b : bindings) out.add(acl(b));
        return out;
    }

    Object run(String op, Map<String, Object> cmd) throws Exception {
        Admin admin = clients.admin(cmd);
        switch (op) {
            case "createTopics": {
                List<NewTopic> topics = new ArrayList<>();
                for (Object o : (List<Object>) cmd.get("topics")) {
                    Map<String, Object> t = (Map<String, Object>) o;
                    NewTopic nt;
                    if (t.containsKey("assignments")) {
                        Map<Integer, List<Integer>> a = new TreeMap<>();
                        ((Map<String, Object>) t.get("assignments")).forEach((p, r) -> {
                            List<Integer> replicas = new ArrayList<>();
                            for (Object x : (List<Object>) r) replicas.add(((Number) x).intValue());
                            a.put(Integer.parseInt(p), replicas);
                        });
                        nt = new NewTopic((String) t.get("name"), a);
                    } else {
                        nt = new NewTopic((String) t.get("name"),
                                t.containsKey("partitions") ? Optional.of(num(t, "partitions", 1)) : Optional.empty(),
                                t.containsKey("replication") ? Optional.of((short) num(t, "replication", 1))
                                        : Optional.empty());
                    }
                    Map<String, String> configs = new HashMap<>();
                    ((Map<String, Object>) t.getOrDefault("configs", Map.of()))
                            .forEach((k, v) -> configs.put(k, String.valueOf(v)));
                    topics.add(nt.configs(configs));
                }
                CreateTopicsResult r = admin.createTopics(topics);
                r.all().get();
                Map<String, Object> out = new TreeMap<>();
                for (NewTopic t : topics) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("topic_id", r.topicId(t.name()).get().toString());
                    m.put("partitions", r.numPartitions(t.name()).get());
                    m.put("replication", r.replicationFactor(t.name()).get());
                    m.put("configs", config(r.config(t.name()).get()));
                    out.put(t.name(), m);
                }
                return out;
            }
            case "listTopics":
                return new TreeSet<>(admin.listTopics(new ListTopicsOptions().listInternal(
                        (Boolean) cmd.getOrDefault("internal", false))).names().get());
            case "describeTopics": {
                Map<String, TopicDescription> d = admin.describeTopics(strings(cmd.get("topics")),
                        new DescribeTopicsOptions().includeAuthorizedOperations(
                                (Boolean) cmd.getOrDefault("authorized_operations", false))).allTopicNames().get();
                Map<String, Object> out = new TreeMap<>();
                for (TopicDescription t : d.values()) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("topic_id", t.topicId().toString());
                    m.put("internal", t.isInternal());
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartitionInfo p : t.partitions()) {
                        Map<String, Object> pm = new LinkedHashMap<>();
                        pm.put("partition", p.partition());
                        pm.put("leader", p.leader() == null ? null : p.leader().id());
                        List<Integer> replicas = new ArrayList<>();
                        for (Node n : p.replicas()) replicas.add(n.id());
                        List<Integer> isr = new ArrayList<>();
                        for (Node n : p.isr()) isr.add(n.id());
                        pm.put("replicas", replicas);
                        pm.put("isr", isr);
                        parts.add(pm);
                    }
                    m.put("partitions", parts);
                    m.put("authorized_operations", ops(t.authorizedOperations()));
                    out.put(t.name(), m);
                }
                return out;
            }
            case "deleteTopics": admin.deleteTopics(strings(cmd.get("topics"))).all().get(); return null;
            case "describeTopicsById": {
                List<org.apache.kafka.common.Uuid> ids = new ArrayList<>();
                for (String id : strings(cmd.get("ids"))) ids.add(org.apache.kafka.common.Uuid.fromString(id));
                Map<String, Object> out = new TreeMap<>();
                admin.describeTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(ids)).allTopicIds().get()
                        .forEach((id, t) -> out.put(id.toString(), Map.of("name", t.name(),
                                "partitions", t.partitions().size())));
                return out;
            }
            case "deleteTopicsById": {
                List<org.apache.kafka.common.Uuid> ids = new ArrayList<>();
                for (String id : strings(cmd.get("ids"))) ids.add(org.apache.kafka.common.Uuid.fromString(id));
                for (org.apache.kafka.common.KafkaFuture<Void> f : admin.deleteTopics(
                        org.apache.kafka.common.TopicCollection.ofTopicIds(ids)).topicIdValues().values()) {
                    f.get();
                }
                return null;
            }
            case "describeConfigs": {
                Map<ConfigResource, Config> d = admin.describeConfigs(List.of(resource(cmd))).all().get();
                return config(d.values().iterator().next());
            }
            case "alterConfigs": {
                List<ConfigEntry> entries = new ArrayList<>();
                ((Map<String, Object>) cmd.get("configs")).forEach((k, v) -> entries.add(new ConfigEntry(k,
                        String.valueOf(v))));
                admin.alterConfigs(Map.of(resource(cmd), new Config(entries))).all().get();
                return null;
            }
            case "incrementalAlterConfigs": {
                List<AlterConfigOp> alter = new ArrayList<>();
                for (Object o : (List<Object>) cmd.get("ops")) {
                    List<Object> x = (List<Object>) o;       // [key, value, SET|DELETE|APPEND|SUBTRACT]
                    alter.add(new AlterConfigOp(new ConfigEntry((String) x.get(0), (String) x.get(1)),
                            AlterConfigOp.OpType.valueOf((String) x.get(2))));
                }
                admin.incrementalAlterConfigs(Map.of(resource(cmd), alter)).all().get();
                return null;
            }
            case "createPartitions": {
                Map<String, NewPartitions> m = new HashMap<>();
                int total = num(cmd, "count", 0);
                if (cmd.containsKey("assignments")) {
                    List<List<Integer>> a = new ArrayList<>();
                    for (Object r : (List<Object>) cmd.get("assignments")) {
                        List<Integer> replicas = new ArrayList<>();
                        for (Object x : (List<Object>) r) replicas.add(((Number) x).intValue());
                        a.add(replicas);
                    }
                    m.put((String) cmd.get("topic"), NewPartitions.increaseTo(total, a));
                } else {
                    m.put((String) cmd.get("topic"), NewPartitions.increaseTo(total));
                }
                admin.createPartitions(m).all().get();
                return null;
            }
            case "deleteRecords": {
                Map<TopicPartition, RecordsToDelete> m = new HashMap<>();
                ((Map<String, Object>) cmd.get("before")).forEach(
                        (k, v) -> m.put(tp(k), RecordsToDelete.beforeOffset(((Number) v).longValue())));
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<TopicPartition, org.apache.kafka.common.KafkaFuture<org.apache.kafka.clients.admin.DeletedRecords>> e
                        : admin.deleteRecords(m).lowWatermarks().entrySet()) {
                    out.put(name(e.getKey()), e.getValue().get().lowWatermark());
                }
                return out;
            }
            case "listOffsets": {
                Map<TopicPartition, OffsetSpec> m = new HashMap<>();
                ((Map<String, Object>) cmd.get("specs")).forEach((k, v) -> {
                    String s = String.valueOf(v);
                    OffsetSpec spec = s.equals("earliest") ? OffsetSpec.earliest()
                            : s.equals("latest") ? OffsetSpec.latest()
                            : s.equals("max_timestamp") ? OffsetSpec.maxTimestamp()
                            : OffsetSpec.forTimestamp(Long.parseLong(s));
                    m.put(tp(k), spec);
                });
                IsolationLevel iso = IsolationLevel.valueOf((String) cmd.getOrDefault("isolation",
                        "READ_UNCOMMITTED"));
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r =
                        admin.listOffsets(m, new ListOffsetsOptions(iso)).all().get();
                Map<String, Object> out = new TreeMap<>();
                r.forEach((k, v) -> {
                    Map<String, Object> i = new LinkedHashMap<>();
                    i.put("offset", v.offset());
                    i.put("timestamp", v.timestamp());
                    i.put("leader_epoch", v.leaderEpoch());
                    out.put(name(k), i);
                });
                return out;
            }
            case "describeLogDirs": {
                List<Integer> brokers = new ArrayList<>();
                for (Object b : (List<Object>) cmd.get("brokers")) brokers.add(((Number) b).intValue());
                Map<Integer, Map<String, LogDirDescription>> d = admin.describeLogDirs(brokers).allDescriptions().get();
                Map<String, Object> out = new TreeMap<>();
                d.forEach((broker, dirs) -> {
                    Map<String, Object> bm = new TreeMap<>();
                    dirs.forEach((dir, desc) -> {
                        Map<String, Object> dm = new LinkedHashMap<>();
                        dm.put("error", desc.error() == null ? null : desc.error().getClass().getSimpleName());
                        dm.put("total_bytes", optLong(desc.totalBytes()));
                        dm.put("usable_bytes", optLong(desc.usableBytes()));
                        Map<String, Object> replicas = new TreeMap<>();
                        for (Map.Entry<TopicPartition, ReplicaInfo> e : desc.replicaInfos().entrySet()) {
                            replicas.put(name(e.getKey()), Map.of("size", e.getValue().size(), "offset_lag",
                                    e.getValue().offsetLag(), "future", e.getValue().isFuture()));
                        }
                        dm.put("replicas", replicas);
                        bm.put(dir, dm);
                    });
                    out.put(String.valueOf(broker), bm);
                });
                return out;
            }
            case "alterReplicaLogDirs": {
                Map<TopicPartitionReplica, String> m = new HashMap<>();
                ((Map<String, Object>) cmd.get("moves")).forEach((k, v) -> {
                    TopicPartition t = tp(k);
                    m.put(new TopicPartitionReplica(t.topic(), t.partition(), num(cmd, "broker", 1)), (String) v);
                });
                admin.alterReplicaLogDirs(m).all().get();
                return null;
            }
            case "describeReplicaLogDirs": {
                List<TopicPartitionReplica> l = new ArrayList<>();
                for (Object k : (List<Object>) cmd.get("partitions")) {
                    TopicPartition t = tp(k);
                    l.add(new TopicPartitionReplica(t.topic(), t.partition(), num(cmd, "broker", 1)));
                }
                Map<String, Object> out = new TreeMap<>();
                admin.describeReplicaLogDirs(l).all().get().forEach((k, v) -> {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("current", v.getCurrentReplicaLogDir());
                    m.put("future", v.getFutureReplicaLogDir());
                    out.put(k.topic() + ":" + k.partition(), m);
                });
                return out;
            }
            case "createAcls": {
                List<AclBinding> l = new ArrayList<>();
                for (Object a : (List<Object>) cmd.get("acls")) l.add(binding((Map<String, Object>) a));
                admin.createAcls(l).all().get();
                return null;
            }
            case "describeAcls":
                return acls(admin.describeAcls(filter((Map<String, Object>) cmd.getOrDefault("filter", Map.of())))
                        .values().get());
            case "deleteAcls": {
                List<AclBindingFilter> l = new ArrayList<>();
                for (Object a : (List<Object>) cmd.get("filters")) l.add(filter((Map<String, Object>) a));
                return acls(admin.deleteAcls(l).all().get());
            }
            default: return groups.run(op, cmd, admin);
        }
    }
}
