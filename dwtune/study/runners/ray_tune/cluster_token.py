"""Whether a cluster (``--address``) accepts this process's token, asked in one call.

``ray.init`` against a cluster that requires a token, without it, retries for about 20 seconds
and prints a warning line per second before it gives up. One gRPC call to the cluster's GCS,
carrying what Ray's own client would carry (its token interceptor: the token of
``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``, else none), tells in
milliseconds; only a refused token is decided here, anything else is left to ``ray.init``.
"""

from __future__ import annotations

import grpc
from ray._private.authentication.grpc_authentication_client_interceptor import (
    SyncAuthenticationMetadataClientInterceptor,
)
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

from dwtune.core.errors import InputError
from dwtune.study.runners.cluster_address import parse_address

TOKEN_CHECK_TIMEOUT_S = 5.0
TOKEN_FIX = (
    "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to the cluster's token (or put it in "
    "~/.ray/auth_token), then rerun"
)


def _target(address: str) -> str:
    host, port = parse_address(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_token(address: str) -> None:
    """One line, in seconds, when the cluster at ``address`` refuses this process's token."""
    channel = grpc.intercept_channel(
        grpc.insecure_channel(_target(address)), SyncAuthenticationMetadataClientInterceptor()
    )
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=TOKEN_CHECK_TIMEOUT_S)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
            raise InputError(
                f"--address {address}: the cluster requires a Ray authentication token and "
                f"refused this one (none sent, or not the cluster's); {TOKEN_FIX}"
            ) from None
    finally:
        channel.close()
