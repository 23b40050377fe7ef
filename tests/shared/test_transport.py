"""The transport policy every client applies: plain http:// only on loopback unless allowed.

The attacker is whoever names a peer: an analyst's recipe or a task definition naming an
http:// aggregator or issuer off the host, or an on-path observer waiting for the shares and
tokens that would then cross the network in the clear. Every client factory (services, SDK,
CLI) refuses to send to such a URL before any byte leaves, redirects included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from client_sdk.device import DeviceConfig
from client_sdk.http import http_client as sdk_client
from client_sdk.policy import TrustedParties
from client_sdk.simulator import Simulator
from services.aggregator.drivers.runner import DriverRunner
from services.common.http import async_http_client, http_client
from shared.transport import InsecureTransportError, TransportPolicy, check_url

OFF_HOST = "http://helper.example:8082/tasks/x/aggregation_jobs/y"


@pytest.mark.parametrize(
    "url",
    [
        "https://helper.example/",
        "http://127.0.0.1:8082/",
        "http://127.8.9.10/",
        "http://[::1]:8080/",
        "http://localhost:8080/",
        "http://api.localhost/",
    ],
)
def test_allowed(url: str) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        OFF_HOST,
        "http://10.0.0.2/",
        "http://localhost.example.com/",
        "http://user:pw@helper.example/",
        "ftp://helper.example/",
        "https:///no-host",
        "helper.example:8082",
    ],
)
def test_refused(url: str) -> None:
    with pytest.raises(InsecureTransportError) as refused:
        check_url(url)
    assert "pw" not in str(refused.value) and "/tasks" not in str(refused.value)


def test_allowed_explicitly() -> None:
    assert check_url(OFF_HOST, allow_insecure_http=True) == OFF_HOST
    with pytest.raises(InsecureTransportError):
        check_url("ftp://helper.example/", allow_insecure_http=True)


def _recording() -> tuple[list[str], httpx.MockTransport]:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        if request.url.path == "/redirect":
            return httpx.Response(307, headers={"Location": OFF_HOST})
        return httpx.Response(200)

    return sent, httpx.MockTransport(handler)


@pytest.mark.parametrize("factory", [http_client, sdk_client], ids=["services", "sdk"])
def test_clients_refuse_before_sending(factory: Callable[..., httpx.Client]) -> None:
    sent, transport = _recording()
    with factory(TransportPolicy(), transport=transport, follow_redirects=True) as client:
        with pytest.raises(httpx.UnsupportedProtocol, match=r"helper\.example is refused"):
            client.post(OFF_HOST, content=b"an input share")
        assert client.get("https://helper.example/ok").status_code == 200
        # A redirect from an https peer to an http one is refused too.
        with pytest.raises(httpx.UnsupportedProtocol):
            client.get("https://helper.example/redirect")
    assert sent == ["https://helper.example/ok", "https://helper.example/redirect"]
    insecure = TransportPolicy(allow_insecure_http=True)
    with factory(insecure, transport=transport) as client:
        assert client.get(OFF_HOST).status_code == 200


def test_async_client_refuses_before_sending() -> None:
    sent, transport = _recording()

    async def run() -> None:
        async with async_http_client(TransportPolicy(), transport=transport) as client:
            with pytest.raises(httpx.UnsupportedProtocol):
                await client.get(OFF_HOST)

    asyncio.run(run())
    assert sent == []


def test_the_default_clients_apply_the_policy() -> None:
    """The leader's driver client and the device simulator's client come from the factories:
    a helper or recipe server named by plain http:// off the host is never contacted."""

    class _Settings:
        helper_timeout_s = 1.0
        transport = TransportPolicy()

    class _Agg:
        settings = _Settings()

    runner = DriverRunner(_Agg())  # type: ignore[arg-type]
    with pytest.raises(httpx.UnsupportedProtocol):
        runner.http.put(OFF_HOST, content=b"an aggregation job")
    simulator = Simulator(
        DeviceConfig(recipe_server_url="http://recipes.example"),
        trusted=TrustedParties(
            leaders=("http://leader.example",),
            helpers=("http://helper.example",),
            token_issuers=("http://issuer.example",),
        ),
    )
    with pytest.raises(httpx.UnsupportedProtocol):
        simulator.http.get("http://recipes.example/recipes/r")
    simulator.http.close()
