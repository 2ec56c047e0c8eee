package guardian.tiered.rlmm;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.Iterator;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.metadata.storage.BrokerReadyCallback;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A measuring {@link RemoteLogMetadataManager} for benchmarks: it delegates every call to the manager named by
 * {@code guardian.bench.inner} (Kafka's {@code TopicBasedRemoteLogMetadataManager} or Guardian's) and records
 * the latency of each call, a write counted until its future completes (what the broker's copy task waits
 * for).  Every second, and at close, it writes per method: calls, errors, p50/p99/max microseconds, to the
 * JSON file {@code guardian.bench.out}.  Same code path for both managers: the figures compare like with like.
 * It forwards {@link BrokerReadyCallback#onBrokerReady} (Kafka's manager creates and consumes its metadata topic
 * only from then on).
 */
public class TimedRemoteLogMetadataManager implements RemoteLogMetadataManager, BrokerReadyCallback {
    private static final int MAX_SAMPLES = 1 << 20;

    private static final class Stat {
        final long[] samples = new long[MAX_SAMPLES];
        int n;
        long errors;

        synchronized void add(long micros) {
            if (n < MAX_SAMPLES) {
                samples[n++] = micros;
            }
        }

        synchronized void error() {
            errors++;
        }

        synchronized String json() {
            long[] s = Arrays.copyOf(samples, n);
            Arrays.sort(s);
            long p50 = n == 0 ? 0 : s[(int) Math.min(n - 1, Math.floor(0.50 * n))];
            long p99 = n == 0 ? 0 : s[(int) Math.min(n - 1, Math.floor(0.99 * n))];
            long max = n == 0 ? 0 : s[n - 1];
            double mean = n == 0 ? 0 : Arrays.stream(s).average().orElse(0);
            return String.format("{\"calls\":%d,\"errors\":%d,\"p50_us\":%d,\"p99_us\":%d,\"max_us\":%d,\"mean_us\":%.1f}",
                    n, errors, p50, p99, max, mean);
        }
    }

    private interface Timed<T> {
        T run() throws RemoteStorageException;
    }

    private final Map<String, Stat> stats = new ConcurrentHashMap<>();
    private RemoteLogMetadataManager inner;
    private Path out;
    private ScheduledExecutorService dumper;

    @Override
    public void configure(Map<String, ?> configs) {
        Object cls = configs.get("guardian.bench.inner");
        Object file = configs.get("guardian.bench.out");
        if (cls == null || file == null) {
            throw new IllegalArgumentException("set rlmm.config.guardian.bench.inner (a RemoteLogMetadataManager class) "
                    + "and rlmm.config.guardian.bench.out (a JSON file)");
        }
        try {
            inner = (RemoteLogMetadataManager) Class.forName(cls.toString(), true, getClass().getClassLoader())
                    .getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException e) {
            throw new IllegalArgumentException("cannot instantiate " + cls + ": " + e);
        }
        out = Path.of(file.toString());
        inner.configure(configs);
        dumper = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "guardian-bench-rlmm-stats");
            t.setDaemon(true);
            return t;
        });
        dumper.scheduleAtFixedRate(this::dump, 1, 1, TimeUnit.SECONDS);
    }

    private void dump() {
        StringBuilder b = new StringBuilder("{\"inner\":\"").append(inner.getClass().getName()).append("\"");
        for (Map.Entry<String, Stat> e : stats.entrySet()) {
            b.append(",\"").append(e.getKey()).append("\":").append(e.getValue().json());
        }
        b.append("}\n");
        try {
            Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
            Files.writeString(tmp, b.toString(), StandardCharsets.UTF_8);
            Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException ignored) {
            // the next dump tries again
        }
    }

    private <T> T time(String name, Timed<T> call) throws RemoteStorageException {
        Stat st = stats.computeIfAbsent(name, k -> new Stat());
        long t0 = System.nanoTime();
        try {
            T r = call.run();
            st.add((System.nanoTime() - t0) / 1000);
            return r;
        } catch (RemoteStorageException | RuntimeException e) {
            st.error();
            throw e;
        }
    }

    private CompletableFuture<Void> timeWrite(String name, Timed<CompletableFuture<Void>> call)
            throws RemoteStorageException {
        return time(name, () -> {
            CompletableFuture<Void> f = call.run();
            try {
                f.get();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new RemoteStorageException(e);
            } catch (ExecutionException e) {
                throw new RemoteStorageException(e.getCause());
            }
            return f;
        });
    }

    @Override
    public CompletableFuture<Void> addRemoteLogSegmentMetadata(RemoteLogSegmentMetadata m) throws RemoteStorageException {
        return timeWrite("add", () -> inner.addRemoteLogSegmentMetadata(m));
    }

    @Override
    public CompletableFuture<Void> updateRemoteLogSegmentMetadata(RemoteLogSegmentMetadataUpdate u)
            throws RemoteStorageException {
        return timeWrite("update_" + u.state().name().toLowerCase(), () -> inner.updateRemoteLogSegmentMetadata(u));
    }

    @Override
    public Optional<RemoteLogSegmentMetadata> remoteLogSegmentMetadata(TopicIdPartition tp, int epoch, long offset)
            throws RemoteStorageException {
        return time("lookup", () -> inner.remoteLogSegmentMetadata(tp, epoch, offset));
    }

    @Override
    public Optional<Long> highestOffsetForEpoch(TopicIdPartition tp, int leaderEpoch) throws RemoteStorageException {
        return time("highest_offset", () -> inner.highestOffsetForEpoch(tp, leaderEpoch));
    }

    @Override
    public CompletableFuture<Void> putRemotePartitionDeleteMetadata(RemotePartitionDeleteMetadata m)
            throws RemoteStorageException {
        return timeWrite("partition_delete", () -> inner.putRemotePartitionDeleteMetadata(m));
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp) throws RemoteStorageException {
        return time("list", () -> inner.listRemoteLogSegments(tp));
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp, int leaderEpoch)
            throws RemoteStorageException {
        return time("list_epoch", () -> inner.listRemoteLogSegments(tp, leaderEpoch));
    }

    @Override
    public void onPartitionLeadershipChanges(Set<TopicIdPartition> leaders, Set<TopicIdPartition> followers) {
        long t0 = System.nanoTime();
        inner.onPartitionLeadershipChanges(leaders, followers);
        stats.computeIfAbsent("leadership_change", k -> new Stat()).add((System.nanoTime() - t0) / 1000);
    }

    @Override
    public void onStopPartitions(Set<TopicIdPartition> partitions) {
        inner.onStopPartitions(partitions);
    }

    @Override
    public long remoteLogSize(TopicIdPartition tp, int leaderEpoch) throws RemoteStorageException {
        return time("remote_log_size", () -> inner.remoteLogSize(tp, leaderEpoch));
    }

    @Override
    public void onBrokerReady() {
        if (inner instanceof BrokerReadyCallback) {  // TopicBasedRemoteLogMetadataManager initialises here
            ((BrokerReadyCallback) inner).onBrokerReady();
        }
    }

    @Override
    public boolean isReady(TopicIdPartition tp) {
        return inner.isReady(tp);
    }

    @Override
    public void close() throws IOException {
        if (dumper != null) {
            dumper.shutdownNow();
            dump();
        }
        if (inner != null) {
            inner.close();
        }
    }
}
