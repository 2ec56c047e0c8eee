"""Remote-storage (tiered) metadata: Raft-held event groups per partition, served over gRPC.

Pure rules in :mod:`tiered.model`; the LMDB store in :mod:`tiered.store`; the replicated state
machine in :mod:`tiered.machine`; the Raft member in :mod:`tiered.node`; the gRPC server and client
in :mod:`tiered.server` and :mod:`tiered.client`; generated protobuf code in :mod:`tiered.proto`.
"""
