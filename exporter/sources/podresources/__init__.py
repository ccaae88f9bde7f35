"""The kubelet pod-resources API (v1), generated from the kubelet's own ``api.proto``.

``api.proto`` is vendored from kubernetes/kubernetes (see its header for the commit);
``api_pb2.py`` and ``api_pb2_grpc.py`` are generated from it by grpcio-tools and committed.
Regenerate with ``python -m exporter.sources.podresources.generate``; a test fails when the
committed stubs differ from a fresh generation.
"""
