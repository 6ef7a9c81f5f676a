"""Bearer-token access control, enforced in one place per server: the ``BearerGuard`` ASGI middleware.

Each server declares an ``AccessPolicy`` naming every route it serves exactly once, as PUBLIC, READ (model
downloads) or WRITE (state-changing). Deny by default: a server whose app has a route the policy does not
declare refuses to start (``AccessPolicy.require_declared`` raises ``RouteAccessError`` naming the route),
and a request that matches no rule is checked as a WRITE. A WRITE endpoint needs the write token; a READ
endpoint needs the read token or the write token. A level whose token is not configured is open, as
upstream (the llm-d clients send no token). Outcomes: ``ok``, ``open`` (no token configured), ``missing``
(401, ``WWW-Authenticate: Bearer``) and ``invalid`` (403); each is counted per endpoint (PUBLIC ones are
not). Tokens come from the environment or from a file (a mounted Kubernetes Secret) that is re-read when it
changes; comparison is constant-time.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from pydantic import SecretStr
from starlette.routing import compile_path

from shared.asgi import ASGIApp, Receive, Scope, Send, header, send_json
from shared.settings import CommonSettings

log = logging.getLogger(__name__)


class Level(StrEnum):
    WRITE = "write"
    READ = "read"
    PUBLIC = "public"


STRICTNESS = {Level.PUBLIC: 0, Level.READ: 1, Level.WRITE: 2}


class Outcome(StrEnum):
    OK = "ok"
    OPEN = "open"
    MISSING = "missing"
    INVALID = "invalid"


class TokenConfigError(ValueError):
    """A token file that cannot be used at start-up (missing, unreadable or empty)."""


class RouteAccessError(ValueError):
    """The access policy and the app's routes disagree (a route undeclared or declared twice, a rule for no
    route): the server refuses to start."""


class TokenSource:
    """One token: a fixed value, a file (re-read when its mtime, size or inode changes), or nothing.

    A server's token file must exist at start-up (``required``: it must never run open by accident); a
    client's may appear later (it sends no token until then)."""

    def __init__(self, value: bytes | None = None, path: Path | None = None, name: str = "token",
                 required: bool = True) -> None:
        self.name = name
        self._value = value
        self._path = path
        self._stamp: tuple[int, int, int] | None = None
        if path is not None:
            self._value = self._read(path)
            if self._value is None and required:
                raise TokenConfigError(f"{name}: token file {path} is missing, unreadable or empty")

    @classmethod
    def of(cls, secret: SecretStr | str | None, path: str | None, name: str, required: bool = True) -> TokenSource:
        if path:
            return cls(path=Path(path), name=name, required=required)
        if isinstance(secret, SecretStr):
            secret = secret.get_secret_value()
        return cls((secret or "").strip().encode() or None, name=name)

    @property
    def configured(self) -> bool:
        return self._value is not None or self._path is not None

    def header(self) -> dict[str, str]:
        """``{"Authorization": "Bearer <token>"}`` for a client, ``{}`` without a token."""
        token = self.current()
        return {"Authorization": f"Bearer {token.decode()}"} if token else {}

    def _read(self, path: Path) -> bytes | None:
        try:
            stat = os.stat(path)
            value = path.read_bytes().strip()
        except OSError:
            return None
        self._stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        return value or None

    def current(self) -> bytes | None:
        """The token now; a changed file is re-read (a broken new version keeps the previous token)."""
        path = self._path
        if path is None:
            return self._value
        try:
            stat = os.stat(path)
        except OSError:
            return self._value
        if (stat.st_mtime_ns, stat.st_size, stat.st_ino) != self._stamp:
            fresh = self._read(path)
            if fresh is None:
                log.error("%s: token file %s became unreadable or empty; keeping the previous token", self.name, path)
            elif fresh != self._value:
                log.info("%s: token file %s changed; new token in use", self.name, path)
                self._value = fresh
        return self._value


@dataclass(frozen=True)
class Tokens:
    write: TokenSource
    read: TokenSource

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> Tokens:
        """From ``write_token``/``read_token`` (or their ``_file``); ``TokenConfigError`` for a bad file."""
        s = settings
        return cls(TokenSource.of(s.write_token, s.write_token_file, "LATENCY_WRITE_TOKEN"),
                   TokenSource.of(s.read_token, s.read_token_file, "LATENCY_READ_TOKEN"))

    def check(self, level: Level, authorization: bytes | None) -> Outcome:
        if level is Level.PUBLIC:
            return Outcome.OPEN
        accepted = [self.write.current()]
        if level is Level.READ:
            if not self.read.configured:
                return Outcome.OPEN
            accepted.append(self.read.current())
        if accepted[0] is None and level is Level.WRITE:
            return Outcome.OPEN
        given = bearer(authorization)
        if given is None:
            return Outcome.MISSING
        # compare against every accepted token (no early exit): constant time in the token's content
        matches = [hmac.compare_digest(given, token) for token in accepted if token is not None]
        return Outcome.OK if any(matches) else Outcome.INVALID


def bearer(authorization: bytes | None) -> bytes | None:
    """The credentials of ``Authorization: Bearer <token>``; None when absent, another scheme or empty."""
    if not authorization:
        return None
    scheme, _, given = authorization.strip().partition(b" ")
    given = given.strip()
    return given if scheme.lower() == b"bearer" and given else None


@dataclass(frozen=True)
class Rule:
    """``path``: the route's path exactly as the app declares it (``/model/{name}/download``), matched with
    Starlette's own ``compile_path``, so a rule matches the requests its route serves. ``endpoint`` labels
    the metric."""

    method: str
    path: str
    level: Level
    endpoint: str

    def pattern(self) -> re.Pattern[str]:
        return compile_path(self.path)[0]


def public(method: str, *paths: str) -> list[Rule]:
    """PUBLIC rules for ``paths`` (never counted: the label is the path)."""
    return [Rule(method, path, Level.PUBLIC, path) for path in paths]


UNDECLARED = Rule("", "", Level.WRITE, "undeclared")  # what a request no rule matches is checked as


class Served(NamedTuple):
    """One (method, path) an app serves, and the name of the route serving it."""

    method: str
    path: str
    name: str


def served_routes(routes: Iterable[object]) -> list[Served]:
    """What ``routes`` serve; a GET route's implicit HEAD is its GET. A route that does not list its methods
    (a Mount, a WebSocket route, a Route without ``methods``) cannot be declared: ``RouteAccessError``."""
    out: list[Served] = []
    for route in routes:
        name = getattr(route, "name", None) or type(route).__name__
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if not isinstance(path, str) or not methods:
            raise RouteAccessError(f"route {name!r} ({type(route).__name__} at {path}) does not list its methods, "
                                   "so it cannot be declared public, read or write")
        implicit = {"HEAD"} if "GET" in methods else set()
        out += [Served(method, path, name) for method in sorted(set(methods) - implicit)]
    return out


class AccessPolicy:
    """Which requests need which token. ``match`` is a dict lookup for exact paths (the hot path); where rules
    overlap (an exact path that a templated rule matches too), the strictest of them applies, whichever route
    the app's router picks."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)
        twice = [key for key, n in Tally((r.method, r.path) for r in self.rules).items() if n > 1]
        if twice:
            raise RouteAccessError("declared more than once: " + ", ".join(f"{m} {p}" for m, p in twice))
        self._patterns = [(r, r.pattern()) for r in self.rules if "{" in r.path]
        self._exact = {(r.method, r.path): self._strictest(r.method, r.path, r) for r in self.rules
                       if "{" not in r.path}

    def _strictest(self, method: str, path: str, *also: Rule) -> Rule | None:
        found = [*also, *(r for r, pattern in self._patterns if r.method == method and pattern.match(path))]
        return max(found, key=lambda r: STRICTNESS[r.level], default=None)

    def match(self, method: str, path: str) -> Rule | None:
        """The rule for a request (HEAD falls back to GET's), None when none is declared."""
        rule = self._exact.get((method, path)) or self._strictest(method, path)
        if rule is None and method == "HEAD":
            return self.match("GET", path)
        return rule

    def level_of(self, method: str, path: str) -> Level | None:
        rule = self.match(method, path)
        return None if rule is None else rule.level

    def paths(self, level: Level) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.rules if r.level is level]

    def require_declared(self, server: str, served: Iterable[Served]) -> None:
        """Raise ``RouteAccessError`` unless every (method, path) served has a rule and every rule a route."""
        served = list(served)
        declared = {(r.method, r.path) for r in self.rules}
        serving = {(s.method, s.path) for s in served}
        problems = [f"route {s.name!r} ({s.method} {s.path}) is not declared public, read or write"
                    for s in served if (s.method, s.path) not in declared]
        problems += [f"{r.method} {r.path} is declared but no route serves it" for r in self.rules
                     if (r.method, r.path) not in serving]
        if problems:
            raise RouteAccessError(f"{server} refuses to start: " + "; ".join(problems)
                                   + " (every route must be declared exactly once in its access policy)")


Counter = Callable[[str, str], None]
STATUS = {Outcome.MISSING: 401, Outcome.INVALID: 403}
DETAIL = {Outcome.MISSING: "Missing bearer token (Authorization: Bearer <token>)",
          Outcome.INVALID: "Invalid bearer token"}
CHALLENGE = {Outcome.MISSING: "Bearer", Outcome.INVALID: 'Bearer error="invalid_token"'}


class BearerGuard:
    """ASGI middleware: every request but a PUBLIC one is checked before the app sees it; one that matches no
    rule (no route serves it: the policy declares them all) is checked as a WRITE."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, tokens: Tokens, count: Counter) -> None:
        self.app = app
        self.policy = policy
        self.tokens = tokens
        self.count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            rule = self.policy.match(scope["method"], scope["path"]) or UNDECLARED
            if rule.level is not Level.PUBLIC:
                outcome = self.tokens.check(rule.level, header(scope, b"authorization"))
                self.count(rule.endpoint, outcome.value)
                if outcome in STATUS:
                    await send_json(send, STATUS[outcome], {"detail": DETAIL[outcome]},
                                    {"WWW-Authenticate": CHALLENGE[outcome]})
                    return
        await self.app(scope, receive, send)


def warn_if_open(tokens: Tokens, policy: AccessPolicy, server: str, host: str, port: int) -> None:
    """The one start-up line saying that writes are unauthenticated (and reachable where)."""
    if tokens.write.configured:
        return
    log.warning("%s: writes are UNAUTHENTICATED (no LATENCY_WRITE_TOKEN / LATENCY_WRITE_TOKEN_FILE): %s open to "
                "anyone who reaches %s:%d", server, ", ".join(policy.paths(Level.WRITE)), host, port)
