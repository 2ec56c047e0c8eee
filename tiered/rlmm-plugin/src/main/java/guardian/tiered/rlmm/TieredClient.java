package guardian.tiered.rlmm;

import io.grpc.CallOptions;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.ClientCalls;
import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * A client of the tiered-metadata Raft group: every call goes to the node believed to be leader, and a
 * node that is not answers UNAVAILABLE with the leader's address in the trailing metadata
 * {@code x-tiered-leader}; the call is retried there, or on the next node, with a growing back-off,
 * until the retry budget is spent.  Reads carry {@code x-tiered-read: leader} so they see every write
 * the leader acknowledged (a lagging follower never answers them).  Each call carries
 * {@code authorization: Bearer <token>}.
 *
 * <p>Retried codes: UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN, RESOURCE_EXHAUSTED, ABORTED (writes carry a
 * producer id and sequence, so a retry of an applied append is answered, not applied again).  Any other
 * code ends the call at once.
 */
final class TieredClient implements AutoCloseable {
    static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    static final Metadata.Key<String> LEADER = Metadata.Key.of("x-tiered-leader", Metadata.ASCII_STRING_MARSHALLER);
    static final Metadata.Key<String> READ = Metadata.Key.of("x-tiered-read", Metadata.ASCII_STRING_MARSHALLER);

    private final List<String> targets;
    private final ChannelCredentials credentials;
    private final String authority;
    private final String token;
    private final long callTimeoutMs;
    private final long budgetMs;
    private final Map<String, ManagedChannel> channels = new ConcurrentHashMap<>();
    private volatile String current;

    TieredClient(List<String> targets, File caFile, String authority, String token, long callTimeoutMs,
                 long budgetMs, boolean plaintext) throws IOException {
        if (targets.isEmpty()) {
            throw new IllegalArgumentException("no tiered-metadata targets");
        }
        this.targets = new ArrayList<>(targets);
        this.credentials = plaintext ? InsecureChannelCredentials.create()
                : TlsChannelCredentials.newBuilder().trustManager(caFile).build();
        this.authority = authority;
        this.token = token;
        this.callTimeoutMs = callTimeoutMs;
        this.budgetMs = budgetMs;
        this.current = this.targets.get(0);
    }

    private ManagedChannel channel(String target) {
        return channels.computeIfAbsent(target, t -> {
            var builder = Grpc.newChannelBuilder(t, credentials);
            if (authority != null && !authority.isEmpty()) {
                builder.overrideAuthority(authority);
            }
            return builder.build();
        });
    }

    /** One call with leader routing and retries; {@code read}: add the leader-read header. */
    <Q, R> R call(MethodDescriptor<Q, R> method, Q request, boolean read) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(budgetMs);
        long backoffMs = 50;
        int rotation = targets.indexOf(current);
        StatusRuntimeException last = null;
        while (true) {
            String target = current;
            Metadata headers = new Metadata();
            headers.put(AUTHORIZATION, "Bearer " + token);
            if (read) {
                headers.put(READ, "leader");
            }
            try {
                var ch = io.grpc.ClientInterceptors.intercept(channel(target),
                        io.grpc.stub.MetadataUtils.newAttachHeadersInterceptor(headers));
                return ClientCalls.blockingUnaryCall(ch, method,
                        CallOptions.DEFAULT.withDeadlineAfter(callTimeoutMs, TimeUnit.MILLISECONDS), request);
            } catch (StatusRuntimeException e) {
                last = e;
                Status.Code code = e.getStatus().getCode();
                boolean retriable = code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED
                        || code == Status.Code.UNKNOWN || code == Status.Code.RESOURCE_EXHAUSTED
                        || code == Status.Code.ABORTED;
                if (!retriable) {
                    throw e;
                }
                String hint = e.getTrailers() == null ? null : e.getTrailers().get(LEADER);
                if (hint != null && !hint.isEmpty() && !hint.equals(target)) {
                    current = hint;  // the leader's address: go there at once
                    continue;
                }
                rotation = (rotation + 1) % targets.size();
                current = targets.get(rotation);
                if (System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs) > deadline) {
                    throw last;
                }
                try {
                    Thread.sleep(backoffMs);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw last;
                }
                backoffMs = Math.min(backoffMs * 2, 1000);
            }
        }
    }

    String currentTarget() {
        return current;
    }

    @Override
    public void close() {
        for (ManagedChannel ch : channels.values()) {
            ch.shutdown();
        }
        for (ManagedChannel ch : channels.values()) {
            try {
                if (!ch.awaitTermination(2, TimeUnit.SECONDS)) {
                    ch.shutdownNow();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                ch.shutdownNow();
            }
        }
    }
}
