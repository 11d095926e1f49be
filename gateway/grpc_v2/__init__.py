"""The Open Inference Protocol's gRPC messages and service: ``grpc_predict_v2.proto`` and the modules
grpcio-tools generates from it (committed; the command is in the .proto)."""
