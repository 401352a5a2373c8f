"""Whether ``--address`` (or ``RAY_ADDRESS``) answers as a Ray cluster that accepts this
process's token, asked in one bounded call before ``ray.init`` dials it.

``ray.init`` against a cluster that requires a token, without it, retries for about 20 seconds
and prints a warning line per second before it gives up; against something that is not Ray (a
plain HTTP server) it never gives up. One gRPC call to the cluster's GCS, carrying what Ray's
own client would carry (its token interceptor: the token of ``RAY_AUTH_MODE=token`` with
``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``, else none), tells in milliseconds to
``GCS_CHECK_TIMEOUT_S``: a refused token, a wrong protocol, nothing listening or no answer
is each one line naming the address dialled.

Ray dials a loopback address (``127.0.0.1``, ``localhost``) at the host's own address instead
(``ray._private.services.resolve_ip_for_localhost``), so that address is asked too.
"""

from __future__ import annotations

import grpc
from ray._private.authentication.grpc_authentication_client_interceptor import (
    SyncAuthenticationMetadataClientInterceptor,
)
from ray._private.services import resolve_ip_for_localhost
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

from dwtune.core.errors import InputError, shown
from dwtune.study.runners.cluster_address import NOT_A_CLUSTER_FIX, parse_address

GCS_CHECK_TIMEOUT_S = 5.0  # a GCS answers GetClusterId in milliseconds
TOKEN_FIX = (
    "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to the cluster's token (or put it in "
    "~/.ray/auth_token), then rerun"
)


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_cluster(address: str, named: str = "--address") -> None:
    """One line, within seconds, unless the GCS at ``address`` (and, for a loopback address,
    at the host address Ray dials instead) answers this process as a Ray cluster.
    ``named``: where the address came from (``--address`` or ``RAY_ADDRESS``)."""
    host, port = parse_address(address)
    _ask_gcs(address, _target(host, port), named)
    dialled = resolve_ip_for_localhost(host)
    if dialled != host:
        _ask_gcs(address, _target(dialled, port), named)


def _ask_gcs(address: str, target: str, named: str) -> None:
    channel = grpc.intercept_channel(
        grpc.insecure_channel(target), SyncAuthenticationMetadataClientInterceptor()
    )
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=GCS_CHECK_TIMEOUT_S)
    except grpc.RpcError as exc:
        raise _refusal(address, target, named, exc) from None
    finally:
        channel.close()


def _refusal(address: str, target: str, named: str, exc: grpc.RpcError) -> InputError:
    where = f"{named} {address}" + (f" (dialled {target})" if target != address else "")
    code = exc.code()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return InputError(
            f"{where}: the cluster requires a Ray authentication token and refused this one "
            f"(none sent, or not the cluster's); {TOKEN_FIX}"
        )
    detail = (exc.details() or "").rsplit(": ", 1)[-1]
    reason = "no answer" if code == grpc.StatusCode.DEADLINE_EXCEEDED else detail
    return InputError(
        f"{where}: not a Ray cluster ({code.name}: {shown(reason, 120)}); {NOT_A_CLUSTER_FIX}"
    )
