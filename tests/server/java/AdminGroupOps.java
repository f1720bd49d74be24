/*
 * The Admin API's commands of Driver.java for consumer groups, producers and transactions, the cluster (leader
 * elections, reassignments, description, quorum, features) and the calls for APIs the broker does not serve; the
 * answers' conventions are AdminOps.java's, whose helpers these use.
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
final class AdminGroupOps {
    Object run(String op, Map<String, Object> cmd, Admin admin) throws Exception {
        switch (op) {
            case "listConsumerGroups": {
                Map<String, Object> out = new TreeMap<>();
                for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) {
                    out.put(g.groupId(), g.state().map(Enum::name).orElse(null));
                }
                return out;
            }
            case "describeConsumerGroups": {
                Map<String, ConsumerGroupDescription> d = admin.describeConsumerGroups(AdminOps.strings(cmd.get("groups")),
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
                        for (TopicPartition t : md.assignment().topicPartitions()) parts.add(AdminOps.name(t));
                        mm.put("assignment", parts);
                        members.add(mm);
                    }
                    m.put("members", members);
                    m.put("authorized_operations", AdminOps.ops(g.authorizedOperations()));
                    out.put(g.groupId(), m);
                }
                return out;
            }
            case "listConsumerGroupOffsets": {
                Map<String, Object> out = new TreeMap<>();
                admin.listConsumerGroupOffsets((String) cmd.get("group")).partitionsToOffsetAndMetadata().get()
                        .forEach((k, v) -> out.put(AdminOps.name(k), v == null ? null : v.offset()));
                return out;
            }
            case "alterConsumerGroupOffsets": {
                Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
                ((Map<String, Object>) cmd.get("offsets")).forEach(
                        (k, v) -> m.put(AdminOps.tp(k), new OffsetAndMetadata(((Number) v).longValue())));
                admin.alterConsumerGroupOffsets((String) cmd.get("group"), m).all().get();
                return null;
            }
            case "deleteConsumerGroupOffsets": {
                Set<TopicPartition> s = new HashSet<>();
                for (Object k : (List<Object>) cmd.get("partitions")) s.add(AdminOps.tp(k));
                admin.deleteConsumerGroupOffsets((String) cmd.get("group"), s).all().get();
                return null;
            }
            case "deleteConsumerGroups": admin.deleteConsumerGroups(AdminOps.strings(cmd.get("groups"))).all().get(); return null;
            case "removeMembersFromConsumerGroup": {
                List<MemberToRemove> l = new ArrayList<>();
                for (String i : AdminOps.strings(cmd.get("instances"))) l.add(new MemberToRemove(i));
                admin.removeMembersFromConsumerGroup((String) cmd.get("group"),
                        new RemoveMembersFromConsumerGroupOptions(l)).all().get();
                return null;
            }
            case "electLeaders": {
                Set<TopicPartition> s = new HashSet<>();
                for (Object k : (List<Object>) cmd.get("partitions")) s.add(AdminOps.tp(k));
                Map<String, Object> out = new TreeMap<>();
                admin.electLeaders(ElectionType.valueOf((String) cmd.getOrDefault("type", "PREFERRED")), s)
                        .partitions().get().forEach((k, v) -> out.put(AdminOps.name(k),
                                v.map(t -> t.getClass().getSimpleName()).orElse(null)));
                return out;
            }
            case "alterPartitionReassignments": {
                Map<TopicPartition, Optional<NewPartitionReassignment>> m = new HashMap<>();
                ((Map<String, Object>) cmd.get("reassignments")).forEach((k, v) -> {
                    if (v == null) {
                        m.put(AdminOps.tp(k), Optional.empty());
                    } else {
                        List<Integer> replicas = new ArrayList<>();
                        for (Object x : (List<Object>) v) replicas.add(((Number) x).intValue());
                        m.put(AdminOps.tp(k), Optional.of(new NewPartitionReassignment(replicas)));
                    }
                });
                admin.alterPartitionReassignments(m).all().get();
                return null;
            }
            case "listPartitionReassignments": {
                Map<String, Object> out = new TreeMap<>();
                Map<TopicPartition, PartitionReassignment> r = admin.listPartitionReassignments().reassignments().get();
                r.forEach((k, v) -> out.put(AdminOps.name(k), Map.of("replicas", v.replicas(), "adding", v.addingReplicas(),
                        "removing", v.removingReplicas())));
                return out;
            }
            case "describeProducers": {
                List<TopicPartition> l = new ArrayList<>();
                for (Object k : (List<Object>) cmd.get("partitions")) l.add(AdminOps.tp(k));
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
                        m.put("coordinator_epoch", AdminOps.optInt(p.coordinatorEpoch()));
                        m.put("txn_start_offset", AdminOps.optLong(p.currentTransactionStartOffset()));
                        ps.add(m);
                    }
                    out.put(AdminOps.name(k), ps);
                });
                return out;
            }
            case "describeTransactions": {
                Map<String, Object> out = new TreeMap<>();
                Map<String, TransactionDescription> r =
                        admin.describeTransactions(AdminOps.strings(cmd.get("ids"))).all().get();
                r.forEach((k, v) -> {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("coordinator", v.coordinatorId());
                    m.put("state", v.state().name());
                    m.put("producer_id", v.producerId());
                    m.put("epoch", v.producerEpoch());
                    m.put("timeout_ms", v.transactionTimeoutMs());
                    m.put("start_ms", AdminOps.optLong(v.transactionStartTimeMs()));
                    Set<String> parts = new TreeSet<>();
                    for (TopicPartition t : v.topicPartitions()) parts.add(AdminOps.name(t));
                    m.put("partitions", parts);
                    out.put(k, m);
                });
                return out;
            }
            case "listTransactions": {
                ListTransactionsOptions o = new ListTransactionsOptions();
                if (cmd.containsKey("states")) {
                    List<org.apache.kafka.clients.admin.TransactionState> states = new ArrayList<>();
                    for (String s : AdminOps.strings(cmd.get("states"))) {
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
                admin.abortTransaction(new AbortTransactionSpec(AdminOps.tp(cmd.get("partition")),
                        ((Number) cmd.get("producer_id")).longValue(), (short) AdminOps.num(cmd, "epoch", 0),
                        AdminOps.num(cmd, "coordinator_epoch", 0))).all().get();
                return null;
            case "fenceProducers": admin.fenceProducers(AdminOps.strings(cmd.get("ids"))).all().get(); return null;
            case "describeCluster": {
                DescribeClusterResult r = admin.describeCluster(new DescribeClusterOptions()
                        .includeAuthorizedOperations((Boolean) cmd.getOrDefault("authorized_operations", false)));
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("cluster_id", r.clusterId().get());
                m.put("controller", AdminOps.node(r.controller().get()));
                List<Object> nodes = new ArrayList<>();
                for (Node n : r.nodes().get()) nodes.add(AdminOps.node(n));
                m.put("nodes", nodes);
                m.put("authorized_operations", AdminOps.ops(r.authorizedOperations().get()));
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
                List<String> users = cmd.containsKey("users") ? AdminOps.strings(cmd.get("users")) : null;
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
            case "unregisterBroker": admin.unregisterBroker(AdminOps.num(cmd, "broker", 1)).all().get(); return null;
            default: throw new IllegalArgumentException("unknown op " + op);
        }
    }
}
