package guardian.tiered.rlmm;

import com.google.protobuf.ByteString;
import guardian.tiered.v1.AppendGroupRequest;
import guardian.tiered.v1.CurrentStateRequest;
import guardian.tiered.v1.CurrentStateResponse;
import guardian.tiered.v1.DeletePartitionRequest;
import guardian.tiered.v1.EventKind;
import guardian.tiered.v1.KafkaSegment;
import guardian.tiered.v1.PartitionRef;
import guardian.tiered.v1.Segment;
import guardian.tiered.v1.SegmentEvent;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteState;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * Guardian's {@link RemoteLogMetadataManager} (KIP-405): a broker's remote-log segment metadata kept by
 * Guardian's tiered-metadata service (a Raft group, LMDB) over gRPC, instead of Kafka's
 * {@code __remote_log_metadata} topic.
 *
 * <p><b>Method.</b> Every add and update is one idempotent {@code AppendGroup} (this instance's random
 * producer id and a per-partition sequence; calls for one partition are serialised), answered once a
 * majority of the Raft group committed it; the returned future is already complete.  Kafka's topic id
 * (its base64 text), segment uuid, leader-epoch map, custom metadata, broker id and times are stored as
 * given; follow-ups name their segment by its uuid.  Reads ({@code remoteLogSegmentMetadata},
 * {@code listRemoteLogSegments}, {@code highestOffsetForEpoch}, {@code remoteLogSize}) are computed from the
 * partition's live segments as the service's leader answers them ({@code CurrentState}), kept per partition
 * until this broker writes the partition, its leadership changes or {@code guardian.tiered.cache.ttl.ms}
 * (5 s) passes: no replay on leadership changes, one call to fill a partition's cache.
 *
 * <p><b>Fencing.</b> An append carries a leader epoch: for a copy start the highest epoch in the
 * segment's epoch map, or this broker's mark for the partition when higher; for updates the mark.  The
 * mark is the partition's fencing epoch in the service when this broker became leader (read lazily at
 * the first write after {@link #onPartitionLeadershipChanges}) and rises with every copy this broker
 * registers.  A deposed leader that still copies after the new one registered a segment of a newer
 * epoch is refused (FAILED_PRECONDITION, a {@link RemoteStorageException}).
 *
 * <p><b>Configuration</b> (the broker's {@code rlmm.config.} prefix stripped):
 * {@code guardian.tiered.targets} (host:port,...), {@code guardian.tiered.cluster},
 * {@code guardian.tiered.ca.file} (PEM; TLS is required unless {@code guardian.tiered.plaintext=true}),
 * {@code guardian.tiered.token.file} or {@code guardian.tiered.token.env} (an operator token, never a
 * value in the configuration), {@code guardian.tiered.call.timeout.ms} (default 5000) and
 * {@code guardian.tiered.retry.budget.ms} (default 60000: how long a call is retried across leader
 * changes before the broker sees an error).
 */
public class GuardianRemoteLogMetadataManager implements RemoteLogMetadataManager {
    public static final String PREFIX = "guardian.tiered.";

    private final ConcurrentHashMap<TopicIdPartition, Object> locks = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<TopicIdPartition, AtomicLong> sequences = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<TopicIdPartition, Integer> marks = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<TopicIdPartition, Cached> cache = new ConcurrentHashMap<>();
    /** Per partition: odd while this broker's write is in flight, +2 per write (a read caches only across none). */
    private final ConcurrentHashMap<TopicIdPartition, AtomicLong> writes = new ConcurrentHashMap<>();
    private long cacheTtlNanos = TimeUnit.MILLISECONDS.toNanos(5000);

    /** A partition's live segments as the service's leader answered them, and when. */
    private static final class Cached {
        final List<Segment> segments;
        final long at;

        Cached(List<Segment> segments, long at) {
            this.segments = segments;
            this.at = at;
        }
    }
    private final long producerId = 1 + (new SecureRandom().nextLong() & Long.MAX_VALUE) % (Long.MAX_VALUE - 1);
    private volatile TieredClient client;
    private String cluster = "kafka";
    private int brokerId = -1;

    @Override
    public void configure(Map<String, ?> configs) {
        String targets = str(configs, "targets", null);
        if (targets == null || targets.isBlank()) {
            throw new IllegalArgumentException("rlmm.config." + PREFIX + "targets is required (host:port,...)");
        }
        cluster = str(configs, "cluster", "kafka");
        Object broker = configs.get("broker.id");
        if (broker != null) {
            brokerId = Integer.parseInt(broker.toString());
        }
        cacheTtlNanos = TimeUnit.MILLISECONDS.toNanos(Long.parseLong(str(configs, "cache.ttl.ms", "5000")));
        boolean plaintext = Boolean.parseBoolean(str(configs, "plaintext", "false"));
        String ca = str(configs, "ca.file", null);
        if (!plaintext && (ca == null || ca.isBlank())) {
            throw new IllegalArgumentException("rlmm.config." + PREFIX + "ca.file is required (the service speaks "
                    + "TLS; plaintext only with rlmm.config." + PREFIX + "plaintext=true)");
        }
        String token = token(configs);
        List<String> list = Arrays.stream(targets.split(",")).map(String::trim).filter(s -> !s.isEmpty())
                .collect(Collectors.toList());
        try {
            client = new TieredClient(list, ca == null ? null : new File(ca), str(configs, "authority", null), token,
                    Long.parseLong(str(configs, "call.timeout.ms", "5000")),
                    Long.parseLong(str(configs, "retry.budget.ms", "60000")), plaintext);
        } catch (IOException e) {
            throw new IllegalArgumentException("rlmm.config." + PREFIX + "ca.file " + ca + " is unreadable: " + e);
        }
    }

    private static String str(Map<String, ?> configs, String key, String dflt) {
        Object v = configs.get(PREFIX + key);
        return v == null ? dflt : v.toString();
    }

    private static String token(Map<String, ?> configs) {
        String file = str(configs, "token.file", null);
        String env = str(configs, "token.env", null);
        if (file != null && !file.isBlank()) {
            try {
                String t = Files.readString(new File(file).toPath(), StandardCharsets.UTF_8).trim();
                if (t.isEmpty()) {
                    throw new IllegalArgumentException("rlmm.config." + PREFIX + "token.file " + file + " is empty");
                }
                return t;
            } catch (IOException e) {
                throw new IllegalArgumentException("rlmm.config." + PREFIX + "token.file " + file
                        + " is unreadable: " + e.getClass().getSimpleName());
            }
        }
        if (env != null && !env.isBlank()) {
            String t = System.getenv(env);
            if (t == null || t.isBlank()) {
                throw new IllegalArgumentException("rlmm.config." + PREFIX + "token.env: $" + env + " is not set");
            }
            return t.trim();
        }
        throw new IllegalArgumentException("set rlmm.config." + PREFIX + "token.file or rlmm.config." + PREFIX
                + "token.env (the service's operator token, by reference)");
    }

    // ------------------------------------------------------------------------------------------ mapping
    PartitionRef ref(TopicIdPartition tp) {
        return PartitionRef.newBuilder().setCluster(cluster).setTopicId(tp.topicId().toString())
                .setPartition(tp.partition()).build();
    }

    static EventKind kind(RemoteLogSegmentState state) {
        switch (state) {
            case COPY_SEGMENT_STARTED: return EventKind.COPY_STARTED;
            case COPY_SEGMENT_FINISHED: return EventKind.COPY_FINISHED;
            case DELETE_SEGMENT_STARTED: return EventKind.DELETE_STARTED;
            case DELETE_SEGMENT_FINISHED: return EventKind.DELETE_FINISHED;
            default: throw new IllegalArgumentException("unknown segment state " + state);
        }
    }

    static RemoteLogSegmentState state(EventKind kind) {
        switch (kind) {
            case COPY_STARTED: return RemoteLogSegmentState.COPY_SEGMENT_STARTED;
            case COPY_FINISHED: return RemoteLogSegmentState.COPY_SEGMENT_FINISHED;
            case DELETE_STARTED: return RemoteLogSegmentState.DELETE_SEGMENT_STARTED;
            case DELETE_FINISHED: return RemoteLogSegmentState.DELETE_SEGMENT_FINISHED;
            default: throw new IllegalArgumentException("unknown event kind " + kind);
        }
    }

    static RemoteLogSegmentMetadata toKafka(TopicIdPartition tp, Segment s) {
        KafkaSegment k = s.getKafka();
        NavigableMap<Integer, Long> epochs = new TreeMap<>(k.getLeaderEpochsMap());
        Optional<RemoteLogSegmentMetadata.CustomMetadata> custom = k.getCustomMetadata().isEmpty() ? Optional.empty()
                : Optional.of(new RemoteLogSegmentMetadata.CustomMetadata(k.getCustomMetadata().toByteArray()));
        return new RemoteLogSegmentMetadata(new RemoteLogSegmentId(tp, Uuid.fromString(k.getSegmentUuid())),
                s.getStartOffset(), s.getEndOffset(), k.getMaxTimestampMs(), k.getBrokerId(), k.getEventTimestampMs(),
                (int) s.getSizeBytes(), custom, state(s.getState()), epochs, k.getTxnIndexEmpty());
    }

    // ------------------------------------------------------------------------------------------ writes
    private void append(TopicIdPartition tp, int epoch, SegmentEvent event) throws RemoteStorageException {
        Object lock = locks.computeIfAbsent(tp, k -> new Object());
        synchronized (lock) {
            int mark = mark(tp);
            int use = Math.max(epoch, mark);
            long seq = sequences.computeIfAbsent(tp, k -> new AtomicLong()).incrementAndGet();
            AtomicLong gen = writes.computeIfAbsent(tp, k -> new AtomicLong());
            gen.incrementAndGet();  // odd: no read caches what it gets until this write is over
            cache.remove(tp);
            AppendGroupRequest req = AppendGroupRequest.newBuilder().setPartition(ref(tp)).setLeaderEpoch(use)
                    .addEvents(event).setProducerId(producerId).setSequence(seq).build();
            try {
                client.call(TieredRpc.APPEND_GROUP, req, false);
                marks.put(tp, use);
            } catch (StatusRuntimeException e) {
                cache.remove(tp);
                gen.incrementAndGet();
                if (e.getStatus().getCode() == Status.Code.FAILED_PRECONDITION) {
                    marks.remove(tp);  // read again at the next write: a newer leader wrote meanwhile
                    throw new RemoteStorageException("fenced by Guardian's tiered-metadata service: " + tp + " epoch "
                            + use + ": " + e.getStatus().getDescription());
                }
                throw new RemoteStorageException("Guardian's tiered-metadata service refused or did not answer an "
                        + event.getKind() + " of " + tp + " (" + e.getStatus().getCode() + ": "
                        + e.getStatus().getDescription() + ")", e);
            }
            cache.remove(tp);
            gen.incrementAndGet();
        }
    }

    private int mark(TopicIdPartition tp) throws RemoteStorageException {
        Integer m = marks.get(tp);
        if (m != null) {
            return m;
        }
        CurrentStateResponse st = read(() -> client.call(TieredRpc.CURRENT_STATE,
                CurrentStateRequest.newBuilder().setPartition(ref(tp)).build(), true), tp);
        int mark = st.getFound() ? Math.max(st.getState().getLeaderEpoch(), 0) : 0;
        marks.put(tp, mark);
        return mark;
    }

    private KafkaSegment.Builder kafkaOf(RemoteLogSegmentId id, int broker, long eventTs,
                                         Optional<RemoteLogSegmentMetadata.CustomMetadata> custom) {
        KafkaSegment.Builder k = KafkaSegment.newBuilder().setSegmentUuid(id.id().toString())
                .setBrokerId(broker).setEventTimestampMs(eventTs).setTopic(id.topicIdPartition().topic());
        custom.ifPresent(c -> k.setCustomMetadata(ByteString.copyFrom(c.value())));
        return k;
    }

    @Override
    public CompletableFuture<Void> addRemoteLogSegmentMetadata(RemoteLogSegmentMetadata m)
            throws RemoteStorageException {
        if (m.state() != RemoteLogSegmentState.COPY_SEGMENT_STARTED) {
            throw new IllegalArgumentException("a segment is added in COPY_SEGMENT_STARTED state, not " + m.state());
        }
        KafkaSegment.Builder k = kafkaOf(m.remoteLogSegmentId(), m.brokerId(), m.eventTimestampMs(), m.customMetadata())
                .putAllLeaderEpochs(m.segmentLeaderEpochs()).setMaxTimestampMs(m.maxTimestampMs())
                .setTxnIndexEmpty(m.isTxnIdxEmpty());
        int epoch = m.segmentLeaderEpochs().lastKey();
        SegmentEvent ev = SegmentEvent.newBuilder().setKind(EventKind.COPY_STARTED).setStartOffset(m.startOffset())
                .setEndOffset(m.endOffset()).setLeaderEpoch(epoch).setSizeBytes(m.segmentSizeInBytes())
                .setRemotePath(m.remoteLogSegmentId().id().toString()).setKafka(k).build();
        append(m.topicIdPartition(), epoch, ev);
        return CompletableFuture.completedFuture(null);
    }

    @Override
    public CompletableFuture<Void> updateRemoteLogSegmentMetadata(RemoteLogSegmentMetadataUpdate u)
            throws RemoteStorageException {
        if (u.state() == RemoteLogSegmentState.COPY_SEGMENT_STARTED) {
            throw new IllegalArgumentException("an update cannot move a segment to COPY_SEGMENT_STARTED");
        }
        KafkaSegment.Builder k = kafkaOf(u.remoteLogSegmentId(), u.brokerId(), u.eventTimestampMs(), u.customMetadata());
        SegmentEvent ev = SegmentEvent.newBuilder().setKind(kind(u.state())).setKafka(k).build();
        append(u.topicIdPartition(), 0, ev);
        return CompletableFuture.completedFuture(null);
    }

    @Override
    public CompletableFuture<Void> putRemotePartitionDeleteMetadata(RemotePartitionDeleteMetadata m)
            throws RemoteStorageException {
        if (m.state() == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED) {
            TopicIdPartition tp = m.topicIdPartition();
            try {
                client.call(TieredRpc.DELETE_PARTITION, DeletePartitionRequest.newBuilder().setPartition(ref(tp)).build(),
                        false);
            } catch (StatusRuntimeException e) {
                throw new RemoteStorageException("deleting " + tp + "'s remote metadata failed: " + e.getStatus(), e);
            }
            forget(Set.of(tp));
        }
        return CompletableFuture.completedFuture(null);
    }

    // ------------------------------------------------------------------------------------------ reads
    private interface Call<T> {
        T run();
    }

    private static <T> T read(Call<T> call, TopicIdPartition tp) throws RemoteStorageException {
        try {
            return call.run();
        } catch (StatusRuntimeException e) {
            throw new RemoteStorageException("reading " + tp + " from Guardian's tiered-metadata service failed ("
                    + e.getStatus().getCode() + ": " + e.getStatus().getDescription() + ")", e);
        }
    }

    /**
     * The partition's live segments: from the cache when this broker has not written the partition, nor seen
     * a leadership change, since they were read and they are younger than {@code cache.ttl.ms} (the leader is
     * the partition's only writer, so its own writes are what changes them); else one leader-only
     * {@code CurrentState} call.
     */
    private List<Segment> segments(TopicIdPartition tp) throws RemoteStorageException {
        Cached c = cache.get(tp);
        long now = System.nanoTime();
        if (c != null && now - c.at < cacheTtlNanos) {
            return c.segments;
        }
        AtomicLong gen = writes.computeIfAbsent(tp, k -> new AtomicLong());
        long before = gen.get();
        CurrentStateResponse st = read(() -> client.call(TieredRpc.CURRENT_STATE,
                CurrentStateRequest.newBuilder().setPartition(ref(tp)).build(), true), tp);
        List<Segment> segs = List.copyOf(st.getSegmentsList());
        if (before % 2 == 0) {  // atomic with a writer's remove: cached only if no write of ours began meanwhile
            cache.compute(tp, (k, old) -> gen.get() == before ? new Cached(segs, now) : old);
        }
        return segs;
    }

    /** The first offset of {@code epoch} in {@code s} (null: the segment has no such epoch). */
    static Long epochStart(Segment s, int epoch) {
        Map<Integer, Long> epochs = s.getKafka().getLeaderEpochsMap();
        if (epochs.isEmpty()) {
            return s.getLeaderEpoch() == epoch ? s.getStartOffset() : null;
        }
        return epochs.get(epoch);
    }

    /** The last offset of {@code epoch} in {@code s}: the next epoch's start - 1, else the segment's end. */
    static Long epochEnd(Segment s, int epoch) {
        if (epochStart(s, epoch) == null) {
            return null;
        }
        Map.Entry<Integer, Long> next = new TreeMap<>(s.getKafka().getLeaderEpochsMap()).higherEntry(epoch);
        return next == null ? s.getEndOffset() : next.getValue() - 1;
    }

    /** KIP-405's lookup (the same rules as tiered/model.py's find_segment). */
    static Optional<Segment> find(List<Segment> segs, int epoch, long offset) {
        Segment best = null;
        long bestStart = -1;
        for (Segment s : segs) {
            if (s.getState() != EventKind.COPY_FINISHED || !s.hasKafka()) {
                continue;
            }
            Long start = epochStart(s, epoch);
            if (start != null && start <= offset && start > bestStart) {
                best = s;
                bestStart = start;
            }
        }
        return best != null && offset <= epochEnd(best, epoch) ? Optional.of(best) : Optional.empty();
    }

    /** Copy-finished segments holding {@code epoch}, by that epoch's first offset. */
    static List<Segment> forEpoch(List<Segment> segs, int epoch) {
        List<Segment> out = new ArrayList<>();
        for (Segment s : segs) {
            if (s.getState() == EventKind.COPY_FINISHED && s.hasKafka() && epochStart(s, epoch) != null) {
                out.add(s);
            }
        }
        out.sort(Comparator.comparingLong((Segment s) -> epochStart(s, epoch)).thenComparingLong(Segment::getSegmentId));
        return out;
    }

    @Override
    public Optional<RemoteLogSegmentMetadata> remoteLogSegmentMetadata(TopicIdPartition tp, int epochForOffset,
                                                                       long offset) throws RemoteStorageException {
        return find(segments(tp), epochForOffset, offset).map(s -> toKafka(tp, s));
    }

    @Override
    public Optional<Long> highestOffsetForEpoch(TopicIdPartition tp, int leaderEpoch) throws RemoteStorageException {
        Long highest = null;
        for (Segment s : forEpoch(segments(tp), leaderEpoch)) {
            long end = epochEnd(s, leaderEpoch);
            highest = highest == null ? end : Math.max(highest, end);
        }
        return Optional.ofNullable(highest);
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp) throws RemoteStorageException {
        List<RemoteLogSegmentMetadata> out = new ArrayList<>();
        for (Segment s : segments(tp)) {
            if (s.hasKafka()) {
                out.add(toKafka(tp, s));
            }
        }
        out.sort(Comparator.comparingLong(RemoteLogSegmentMetadata::startOffset));
        return out.iterator();
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp, int leaderEpoch)
            throws RemoteStorageException {
        List<RemoteLogSegmentMetadata> out = new ArrayList<>();
        for (Segment s : forEpoch(segments(tp), leaderEpoch)) {
            out.add(toKafka(tp, s));
        }
        return out.iterator();
    }

    @Override
    public long remoteLogSize(TopicIdPartition tp, int leaderEpoch) throws RemoteStorageException {
        long size = 0;
        for (Segment s : forEpoch(segments(tp), leaderEpoch)) {
            size += s.getSizeBytes();
        }
        return size;
    }

    // ------------------------------------------------------------------------------------------ life cycle
    @Override
    public void onPartitionLeadershipChanges(Set<TopicIdPartition> leaderPartitions,
                                             Set<TopicIdPartition> followerPartitions) {
        // Nothing to replay: the service holds every partition's state.  Forget the fencing marks: the next
        // write of a partition reads the service's mark again.
        forget(leaderPartitions);
        forget(followerPartitions);
    }

    @Override
    public void onStopPartitions(Set<TopicIdPartition> partitions) {
        forget(partitions);
    }

    private void forget(Set<TopicIdPartition> partitions) {
        for (TopicIdPartition tp : partitions) {
            marks.remove(tp);
            cache.remove(tp);
        }
    }

    @Override
    public void close() throws IOException {
        TieredClient c = client;
        if (c != null) {
            c.close();
        }
    }
}
