"""shared.auth: token sources (env, file, re-read on change), the check per level, policy matching, the
declaration check (every route exactly once) and the guard's deny-by-default."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError
from starlette.routing import Mount, Route

from shared.asgi import Receive, Scope, Send, send_json
from shared.auth import (
    AccessPolicy,
    BearerGuard,
    Level,
    Outcome,
    RouteAccessError,
    Rule,
    Served,
    TokenConfigError,
    Tokens,
    TokenSource,
    bearer,
    public,
    served_routes,
)
from shared.predictor_settings import PredictorSettings
from shared.trainer_settings import TrainerSettings


def tokens(write: str | None, read: str | None) -> Tokens:
    return Tokens(TokenSource.of(SecretStr(write) if write else None, None, "w"),
                  TokenSource.of(SecretStr(read) if read else None, None, "r"))


@pytest.mark.parametrize(("write", "read", "level", "header", "outcome"), [
    (None, None, Level.WRITE, None, Outcome.OPEN),
    (None, None, Level.READ, None, Outcome.OPEN),
    ("w", None, Level.WRITE, None, Outcome.MISSING),
    ("w", None, Level.WRITE, b"Bearer w", Outcome.OK),
    ("w", None, Level.WRITE, b"bearer   w ", Outcome.OK),
    ("w", None, Level.WRITE, b"Bearer x", Outcome.INVALID),
    ("w", None, Level.WRITE, b"Basic dzp3", Outcome.MISSING),
    ("w", None, Level.WRITE, b"Bearer ", Outcome.MISSING),
    ("w", None, Level.READ, None, Outcome.OPEN),  # no read token: downloads stay open
    ("w", "r", Level.READ, None, Outcome.MISSING),
    ("w", "r", Level.READ, b"Bearer r", Outcome.OK),
    ("w", "r", Level.READ, b"Bearer w", Outcome.OK),  # the write token may read
    ("w", "r", Level.WRITE, b"Bearer r", Outcome.INVALID),  # ... not the other way round
    (None, "r", Level.WRITE, None, Outcome.OPEN),
    (None, "r", Level.READ, b"Bearer r", Outcome.OK),
    ("w", "r", Level.PUBLIC, None, Outcome.OPEN),
])
def test_check(write: str | None, read: str | None, level: Level, header: bytes | None, outcome: Outcome) -> None:
    assert tokens(write, read).check(level, header) is outcome


def test_bearer_parsing() -> None:
    assert bearer(b"Bearer abc") == b"abc"
    assert bearer(b"BEARER abc") == b"abc"
    assert bearer(b"Bearerabc") is None
    assert bearer(None) is None


def test_token_file_is_read_stripped_and_re_read_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    source = TokenSource.of(None, str(path), "LATENCY_WRITE_TOKEN")
    assert source.current() == b"first"
    path.write_text("second-longer\n")
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert source.current() == b"second-longer"
    path.write_text("")  # a broken rotation keeps the previous token
    os.utime(path, ns=(2, 2))
    assert source.current() == b"second-longer"
    path.unlink()
    assert source.current() == b"second-longer"


def test_server_token_file_must_exist_and_not_be_empty(tmp_path: Path) -> None:
    with pytest.raises(TokenConfigError, match="missing, unreadable or empty"):
        TokenSource.of(None, str(tmp_path / "absent"), "LATENCY_WRITE_TOKEN")
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(TokenConfigError, match="LATENCY_WRITE_TOKEN"):
        TokenSource.of(None, str(tmp_path / "empty"), "LATENCY_WRITE_TOKEN")


def test_client_token_file_may_appear_later(tmp_path: Path) -> None:
    path = tmp_path / "token"
    source = TokenSource.of(None, str(path), "client", required=False)
    assert source.header() == {}
    path.write_text("t0k")
    assert source.header() == {"Authorization": "Bearer t0k"}


@pytest.mark.parametrize("cls", [TrainerSettings, PredictorSettings])
def test_settings_refuse_a_token_and_its_file_together(cls: type, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="LATENCY_WRITE_TOKEN or LATENCY_WRITE_TOKEN_FILE"):
        cls(write_token="a", write_token_file=str(tmp_path / "t"))
    with pytest.raises(ValidationError, match="LATENCY_READ_TOKEN or LATENCY_READ_TOKEN_FILE"):
        cls(read_token="a", read_token_file=str(tmp_path / "t"))


def test_settings_from_env_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "w").write_text("ww")
    monkeypatch.setenv("LATENCY_WRITE_TOKEN_FILE", str(tmp_path / "w"))
    monkeypatch.setenv("LATENCY_READ_TOKEN", "rr")
    found = Tokens.from_settings(TrainerSettings.from_env())
    assert (found.write.current(), found.read.current()) == (b"ww", b"rr")
    assert "rr" not in repr(TrainerSettings.from_env())  # secrets stay out of logs


def test_policy_matching() -> None:
    policy = AccessPolicy([Rule("POST", "/flush", Level.WRITE, "flush"),
                           Rule("GET", "/model/{name}/download", Level.READ, "model_download"),
                           Rule("GET", "/bundle/v/{version}/{filename}", Level.READ, "bundle"),
                           *public("GET", "/model/download/info", "/healthz")])
    assert policy.level_of("POST", "/flush") is Level.WRITE
    assert policy.level_of("GET", "/flush") is None
    assert policy.level_of("GET", "/model/ttft/download") is Level.READ
    assert policy.level_of("GET", "/model/download/info") is Level.PUBLIC
    assert policy.level_of("GET", "/model/a/b/download") is None
    assert policy.level_of("GET", "/bundle/v/3/ttft.ubj") is Level.READ
    assert policy.level_of("GET", "/bundle/v/3/a/b") is None
    assert policy.level_of("HEAD", "/model/ttft/download") is Level.READ  # HEAD is served by the GET route
    assert policy.level_of("HEAD", "/healthz") is Level.PUBLIC
    assert policy.paths(Level.WRITE) == ["POST /flush"]


def test_overlapping_rules_take_the_strictest() -> None:
    """Whichever route the router picks for ``/x/admin``, the guard asks for the write token."""
    policy = AccessPolicy([*public("GET", "/x/admin"), Rule("GET", "/x/{key}", Level.WRITE, "x")])
    assert policy.level_of("GET", "/x/admin") is Level.WRITE
    assert policy.level_of("GET", "/x/other") is Level.WRITE


def test_a_route_declared_twice_is_refused() -> None:
    with pytest.raises(RouteAccessError, match="declared more than once: POST /flush"):
        AccessPolicy([Rule("POST", "/flush", Level.WRITE, "flush"), *public("POST", "/flush")])


def test_served_routes_list_methods_and_fold_head_into_get() -> None:
    async def endpoint(request: object) -> None: ...

    routes = [Route("/a", endpoint, methods=["GET"]), Route("/b/{id}", endpoint, methods=["POST", "PUT"], name="b")]
    assert served_routes(routes) == [Served("GET", "/a", "endpoint"), Served("POST", "/b/{id}", "b"),
                                     Served("PUT", "/b/{id}", "b")]
    class AnyMethod:  # an ASGI app as a route's endpoint serves every method
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...

    for undeclarable in (Route("/any", AnyMethod()), Mount("/sub", routes=routes)):
        with pytest.raises(RouteAccessError, match="does not list its methods"):
            served_routes([undeclarable])


def test_require_declared_names_every_undeclared_route_and_every_stale_rule() -> None:
    policy = AccessPolicy([Rule("POST", "/flush", Level.WRITE, "flush"), *public("GET", "/gone")])
    policy.require_declared("srv", [Served("POST", "/flush", "flush"), Served("GET", "/gone", "gone")])
    with pytest.raises(RouteAccessError) as raised:
        policy.require_declared("srv", [Served("POST", "/flush", "flush"), Served("POST", "/new", "new_route")])
    message = str(raised.value)
    assert message.startswith("srv refuses to start")
    assert "route 'new_route' (POST /new) is not declared public, read or write" in message
    assert "GET /gone is declared but no route serves it" in message


async def _guarded(policy: AccessPolicy, write: str | None, method: str, path: str,
                   authorization: bytes | None = None) -> tuple[int, list[tuple[str, str]]]:
    reached: list[int] = []
    counted: list[tuple[str, str]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(1)
        await send_json(send, 200, {})

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    guard = BearerGuard(app, policy, tokens(write, None), lambda e, o: counted.append((e, o)))
    headers = [(b"authorization", authorization)] if authorization else []
    await guard({"type": "http", "method": method, "path": path, "headers": headers}, receive, send)
    status = sent[0]["status"]
    assert bool(reached) == (status == 200)
    return status, counted


@pytest.mark.parametrize(("method", "path", "authorization", "status", "counted"), [
    ("GET", "/healthz", None, 200, []),  # public: never checked nor counted
    ("HEAD", "/healthz", None, 200, []),
    ("POST", "/flush", None, 401, [("flush", "missing")]),
    ("POST", "/flush", b"Bearer w", 200, [("flush", "ok")]),
    ("POST", "/nowhere", None, 401, [("undeclared", "missing")]),  # deny by default: checked as a write
    ("GET", "/healthz/extra", b"Bearer x", 403, [("undeclared", "invalid")]),
    ("DELETE", "/healthz", b"Bearer w", 200, [("undeclared", "ok")]),  # the app answers (405 there)
])
def test_guard_checks_undeclared_requests_as_writes(method: str, path: str, authorization: bytes | None,
                                                   status: int, counted: list[tuple[str, str]]) -> None:
    policy = AccessPolicy([Rule("POST", "/flush", Level.WRITE, "flush"), *public("GET", "/healthz")])
    assert asyncio.run(_guarded(policy, "w", method, path, authorization)) == (status, counted)


def test_guard_without_a_write_token_lets_undeclared_requests_through() -> None:
    policy = AccessPolicy(public("GET", "/healthz"))
    assert asyncio.run(_guarded(policy, None, "POST", "/nowhere")) == (200, [("undeclared", "open")])
