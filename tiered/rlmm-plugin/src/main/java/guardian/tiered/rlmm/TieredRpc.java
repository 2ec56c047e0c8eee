package guardian.tiered.rlmm;

import com.google.protobuf.Message;
import guardian.tiered.v1.AppendGroupRequest;
import guardian.tiered.v1.AppendGroupResponse;
import guardian.tiered.v1.CurrentStateRequest;
import guardian.tiered.v1.CurrentStateResponse;
import guardian.tiered.v1.DeletePartitionRequest;
import guardian.tiered.v1.DeletePartitionResponse;
import guardian.tiered.v1.EpochSegmentsRequest;
import guardian.tiered.v1.EpochSegmentsResponse;
import guardian.tiered.v1.FindSegmentRequest;
import guardian.tiered.v1.FindSegmentResponse;
import guardian.tiered.v1.SegmentByIdRequest;
import io.grpc.MethodDescriptor;
import io.grpc.protobuf.ProtoUtils;

/**
 * The tiered-metadata service's unary methods (tiered/proto/tiered_metadata.proto, service
 * {@code guardian.tiered.v1.TieredMetadata}) as gRPC method descriptors over the generated message classes.
 * Written here because Maven Central serves no protoc-gen-grpc-java binary for the gRPC version in use;
 * the names must match the .proto's service and rpc names.
 */
final class TieredRpc {
    static final String SERVICE = "guardian.tiered.v1.TieredMetadata";

    static final MethodDescriptor<AppendGroupRequest, AppendGroupResponse> APPEND_GROUP =
            unary("AppendGroup", AppendGroupRequest.getDefaultInstance(), AppendGroupResponse.getDefaultInstance());
    static final MethodDescriptor<CurrentStateRequest, CurrentStateResponse> CURRENT_STATE =
            unary("CurrentState", CurrentStateRequest.getDefaultInstance(), CurrentStateResponse.getDefaultInstance());
    static final MethodDescriptor<FindSegmentRequest, FindSegmentResponse> FIND_SEGMENT =
            unary("FindSegment", FindSegmentRequest.getDefaultInstance(), FindSegmentResponse.getDefaultInstance());
    static final MethodDescriptor<EpochSegmentsRequest, EpochSegmentsResponse> EPOCH_SEGMENTS =
            unary("EpochSegments", EpochSegmentsRequest.getDefaultInstance(), EpochSegmentsResponse.getDefaultInstance());
    static final MethodDescriptor<SegmentByIdRequest, FindSegmentResponse> SEGMENT_BY_ID =
            unary("SegmentById", SegmentByIdRequest.getDefaultInstance(), FindSegmentResponse.getDefaultInstance());
    static final MethodDescriptor<DeletePartitionRequest, DeletePartitionResponse> DELETE_PARTITION =
            unary("DeletePartition", DeletePartitionRequest.getDefaultInstance(),
                  DeletePartitionResponse.getDefaultInstance());

    private TieredRpc() { }

    private static <Q extends Message, R extends Message> MethodDescriptor<Q, R> unary(String name, Q req, R resp) {
        return MethodDescriptor.<Q, R>newBuilder()
                .setType(MethodDescriptor.MethodType.UNARY)
                .setFullMethodName(MethodDescriptor.generateFullMethodName(SERVICE, name))
                .setRequestMarshaller(ProtoUtils.marshaller(req))
                .setResponseMarshaller(ProtoUtils.marshaller(resp))
                .build();
    }
}
