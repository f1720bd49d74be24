/*
 * The Admin API's commands of Driver.java: each takes {"op": <Admin method name>, "client": <admin name, default
 * "admin">, ...arguments} and answers plain JSON of the result (partitions are "topic:partition" strings,
 * authorized operations sorted AclOperation names, absent optionals null). The arguments per op are read below;
 * tests/server/java/driver.py documents them beside the Python helpers.
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
            case "listConsumerGroups": {
                Map<String, Object> out = new TreeMap<>();
                for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) {
                    out.put(g.groupId(), g.state().map(Enum::name).orElse(null));
                }
                return out;
            }
            case "describeConsumerGroups": {
                Map<String, ConsumerGroupDescription> d = admin.describeConsumerGroups(strings(cmd.get("groups")),
                        new DescribeConsumerGroupsOptions().includeAuthorizedOperations(
                                (Boolean) cmd.getOrDefault("authorized_operations", false))).all().get();
                Map<String, Object> out = new TreeMap<>();
                for (ConsumerGroupDescription g : d.values()) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("state", g.state().name());
                    m.put("simple", g.isSimpleConsumerGroup());
                    m.put("assignor", g.partitionAssignor());
                    m.put("coordinator", g.coordinator() == null ? null : g.coordinator().id());
                    List<Object> members = new ArrayList<>();
                    for (MemberDescription md : g.members()) {
                        Map<String, Object> mm = new LinkedHashMap<>();
                        mm.put("member", md.consumerId());
                        mm.put("instance", md.groupInstanceId());
                        mm.put("client_id", md.clientId());
                        Set<String> parts = new TreeSet<>();
                        for (TopicPartition t : md.assignment().topicPartitions()) parts.add(name(t));
                        mm.put("assignment", parts);
                        members.add(mm);
                    }
                    m.put("members", members);
                    m.put("authorized_operations", ops(g.authorizedOperations()));
                    out.put(g.groupId(), m);
                }
                return out;
            }
            case "listConsumerGroupOffsets": {
                Map<String, Object> out = new TreeMap<>();
                admin.listConsumerGroupOffsets((String) cmd.get("group")).partitionsToOffsetAndMetadata().get()
                        .forEach((k, v) -> out.put(name(k), v == null ? null : v.offset()));
                return out;
            }
            case "alterConsumerGroupOffsets": {
                Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
                ((Map<String, Object>) cmd.get("offsets")).forEach(
                        (k, v) -> m.put(tp(k), new OffsetAndMetadata(((Number) v).longValue())));
                admin.alterConsumerGroupOffsets((String) cmd.get("group"), m).all().get();
                return null;
            }
            case "deleteConsumerGroupOffsets": {
                Set<TopicPartition> s = new HashSet<>();
                for (Object k : (List<Object>) cmd.get("partitions")) s.add(tp(k));
                admin.deleteConsumerGroupOffsets((String) cmd.get("group"), s).all().get();
                return null;
            }
            case "deleteConsumerGroups": admin.deleteConsumerGroups(strings(cmd.get("groups"))).all().get(); return null;
            case "removeMembersFromConsumerGroup": {
                List<MemberToRemove> l = new ArrayList<>();
                for (String i : strings(cmd.get("instances"))) l.add(new MemberToRemove(i));
                admin.removeMembersFromConsumerGroup((String) cmd.get("group"),
                        new RemoveMembersFromConsumerGroupOptions(l)).all().get();
                return null;
            }
            case "electLeaders": {
                Set<TopicPartition> s = new HashSet<>();
                for (Object k : (List<Object>) cmd.get("partitions")) s.add(tp(k));
                Map<String, Object> out = new TreeMap<>();
                admin.electLeaders(ElectionType.valueOf((String) cmd.getOrDefault("type", "PREFERRED")), s)
                        .partitions().get().forEach((k, v) -> out.put(name(k),
                                v.map(t -> t.getClass().getSimpleName()).orElse(null)));
                return out;
            }
            case "alterPartitionReassignments": {
                Map<TopicPartition, Optional<NewPartitionReassignment>> m = new HashMap<>();
                ((Map<String, Object>) cmd.get("reassignments")).forEach((k, v) -> {
                    if (v == null) {
                        m.put(tp(k), Optional.empty());
                    } else {
                        List<Integer> replicas = new ArrayList<>();
                        for (Object x : (List<Object>) v) replicas.add(((Number) x).intValue());
                        m.put(tp(k), Optional.of(new NewPartitionReassignment(replicas)));
                    }
                });
                admin.alterPartitionReassignments(m).all().get();
                return null;
            }
            case "listPartitionReassignments": {
                Map<String, Object> out = new TreeMap<>();
                Map<TopicPartition, PartitionReassignment> r = admin.listPartitionReassignments().reassignments().get();
                r.forEach((k, v) -> out.put(name(k), Map.of("replicas", v.replicas(), "adding", v.addingReplicas(),
                        "removing", v.removingReplicas())));
                return out;
            }
            case "describeProducers": {
                List<TopicPartition> l = new ArrayList<>();
                for (Object k : (List<Object>) cmd.get("partitions")) l.add(tp(k));
                Map<String, Object> out = new TreeMap<>();
                Map<TopicPartition, PartitionProducerState> r = admin.describeProducers(l).all().get();
                r.forEach((k, v) -> {
                    List<Object> ps = new ArrayList<>();
                    for (ProducerState p : v.activeProducers()) {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("producer_id", p.producerId());
                        m.put("epoch", p.producerEpoch());
                        m.put("last_sequence", p.lastSequence());
                        m.put("last_timestamp", p.lastTimestamp());
                        m.put("coordinator_epoch", optInt(p.coordinatorEpoch()));
                        m.put("txn_start_offset", optLong(p.currentTransactionStartOffset()));
                        ps.add(m);
                    }
                    out.put(name(k), ps);
                });
                return out;
            }
            case "describeTransactions": {
                Map<String, Object> out = new TreeMap<>();
                Map<String, TransactionDescription> r =
                        admin.describeTransactions(strings(cmd.get("ids"))).all().get();
                r.forEach((k, v) -> {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("coordinator", v.coordinatorId());
                    m.put("state", v.state().name());
                    m.put("producer_id", v.producerId());
                    m.put("epoch", v.producerEpoch());
                    m.put("timeout_ms", v.transactionTimeoutMs());
                    m.put("start_ms", optLong(v.transactionStartTimeMs()));
                    Set<String> parts = new TreeSet<>();
                    for (TopicPartition t : v.topicPartitions()) parts.add(name(t));
                    m.put("partitions", parts);
                    out.put(k, m);
                });
                return out;
            }
            case "listTransactions": {
                ListTransactionsOptions o = new ListTransactionsOptions();
                if (cmd.containsKey("states")) {
                    List<org.apache.kafka.clients.admin.TransactionState> states = new ArrayList<>();
                    for (String s : strings(cmd.get("states"))) {
                        states.add(org.apache.kafka.clients.admin.TransactionState.valueOf(s));
                    }
                    o.filterStates(states);
                }
                if (cmd.containsKey("producer_ids")) {
                    List<Long> ids = new ArrayList<>();
                    for (Object x : (List<Object>) cmd.get("producer_ids")) ids.add(((Number) x).longValue());
                    o.filterProducerIds(ids);
                }
                if (cmd.containsKey("duration_ms")) o.filterOnDuration(((Number) cmd.get("duration_ms")).longValue());
                Map<String, Object> out = new TreeMap<>();
                for (TransactionListing t : admin.listTransactions(o).all().get()) {
                    out.put(t.transactionalId(), Map.of("producer_id", t.producerId(), "state", t.state().name()));
                }
                return out;
            }
            case "abortTransaction":
                admin.abortTransaction(new AbortTransactionSpec(tp(cmd.get("partition")),
                        ((Number) cmd.get("producer_id")).longValue(), (short) num(cmd, "epoch", 0),
                        num(cmd, "coordinator_epoch", 0))).all().get();
                return null;
            case "fenceProducers": admin.fenceProducers(strings(cmd.get("ids"))).all().get(); return null;
            case "describeCluster": {
                DescribeClusterResult r = admin.describeCluster(new DescribeClusterOptions()
                        .includeAuthorizedOperations((Boolean) cmd.getOrDefault("authorized_operations", false)));
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("cluster_id", r.clusterId().get());
                m.put("controller", node(r.controller().get()));
                List<Object> nodes = new ArrayList<>();
                for (Node n : r.nodes().get()) nodes.add(node(n));
                m.put("nodes", nodes);
                m.put("authorized_operations", ops(r.authorizedOperations().get()));
                return m;
            }
            case "describeMetadataQuorum": {
                QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("leader", q.leaderId());
                m.put("leader_epoch", q.leaderEpoch());
                m.put("high_watermark", q.highWatermark());
                List<Object> voters = new ArrayList<>();
                for (QuorumInfo.ReplicaState r : q.voters()) {
                    voters.add(Map.of("id", r.replicaId(), "log_end_offset", r.logEndOffset()));
                }
                m.put("voters", voters);
                m.put("observers", q.observers().size());
                return m;
            }
            case "describeFeatures": {
                FeatureMetadata f = admin.describeFeatures().featureMetadata().get();
                Map<String, Object> m = new LinkedHashMap<>();
                Map<String, Object> fin = new TreeMap<>();
                f.finalizedFeatures().forEach((k, v) -> fin.put(k, List.of(v.minVersionLevel(), v.maxVersionLevel())));
                Map<String, Object> sup = new TreeMap<>();
                f.supportedFeatures().forEach((k, v) -> sup.put(k, List.of(v.minVersion(), v.maxVersion())));
                m.put("finalized", fin);
                m.put("supported", sup);
                m.put("epoch", f.finalizedFeaturesEpoch());
                return m;
            }
            // Calls for APIs the broker does not serve: each must fail (UnsupportedVersionException).
            case "describeClientQuotas":
                return String.valueOf(admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get());
            case "createDelegationToken":
                return String.valueOf(admin.createDelegationToken().delegationToken().get());
            case "describeDelegationToken":
                return String.valueOf(admin.describeDelegationToken().delegationTokens().get());
            case "describeUserScramCredential": {     // one user, through the result's description(user)
                String user = (String) cmd.get("user");
                List<Object> infos = new ArrayList<>();
                for (org.apache.kafka.clients.admin.ScramCredentialInfo i : admin.describeUserScramCredentials(
                        List.of(user)).description(user).get().credentialInfos()) {
                    infos.add(List.of(i.mechanism().name(), i.iterations()));
                }
                return infos;
            }
            case "describeUserScramCredentials": {
                Map<String, Object> out = new TreeMap<>();
                List<String> users = cmd.containsKey("users") ? strings(cmd.get("users")) : null;
                admin.describeUserScramCredentials(users).all().get().forEach((user, d) -> {
                    List<Object> infos = new ArrayList<>();
                    for (org.apache.kafka.clients.admin.ScramCredentialInfo i : d.credentialInfos()) {
                        infos.add(List.of(i.mechanism().name(), i.iterations()));
                    }
                    out.put(user, infos);
                });
                return out;
            }
            case "updateFeatures":
                admin.updateFeatures(Map.of("metadata.version", new FeatureUpdate((short) 1,
                        FeatureUpdate.UpgradeType.UPGRADE)), new UpdateFeaturesOptions()).all().get();
                return null;
            case "listClientMetricsResources":
                return String.valueOf(admin.listClientMetricsResources().all().get());
            case "alterClientQuotas":
                admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(
                        new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("user", "alice")),
                        List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("producer_byte_rate",
                                1024.0))))).all().get();
                return null;
            case "renewDelegationToken":
                admin.renewDelegationToken(new byte[]{1, 2, 3}).expiryTimestamp().get();
                return null;
            case "expireDelegationToken":
                admin.expireDelegationToken(new byte[]{1, 2, 3}).expiryTimestamp().get();
                return null;
            case "alterUserScramCredentials":
                admin.alterUserScramCredentials(List.of(new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(
                        "alice", new org.apache.kafka.clients.admin.ScramCredentialInfo(
                                org.apache.kafka.clients.admin.ScramMechanism.SCRAM_SHA_256, 4096), "secret")))
                        .all().get();
                return null;
            case "addRaftVoter":
                admin.addRaftVoter(2, org.apache.kafka.common.Uuid.randomUuid(), Set.of(
                        new org.apache.kafka.clients.admin.RaftVoterEndpoint("CONTROLLER", "localhost", 9093)))
                        .all().get();
                return null;
            case "removeRaftVoter":
                admin.removeRaftVoter(2, org.apache.kafka.common.Uuid.randomUuid()).all().get();
                return null;
            case "unregisterBroker": admin.unregisterBroker(num(cmd, "broker", 1)).all().get(); return null;
            default: throw new IllegalArgumentException("unknown op " + op);
        }
    }
}
