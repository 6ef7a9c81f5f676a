"""Bearer-token access control, enforced in one place per server: the ``BearerGuard`` ASGI middleware.

Each server declares an ``AccessPolicy``: which (method, path) are WRITE (state-changing) and which are
READ (model downloads). A WRITE endpoint needs the write token; a READ endpoint needs the read token or
the write token. A level whose token is not configured is open, as upstream (the llm-d clients send no
token). Outcomes: ``ok``, ``open`` (no token configured), ``missing`` (401, ``WWW-Authenticate: Bearer``)
and ``invalid`` (403); each is counted per endpoint. Tokens come from the environment or from a file (a
mounted Kubernetes Secret) that is re-read when it changes; comparison is constant-time.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import SecretStr

from shared.asgi import ASGIApp, Receive, Scope, Send, header, send_json
from shared.settings import CommonSettings

log = logging.getLogger(__name__)


class Level(StrEnum):
    WRITE = "write"
    READ = "read"


class Outcome(StrEnum):
    OK = "ok"
    OPEN = "open"
    MISSING = "missing"
    INVALID = "invalid"


class TokenConfigError(ValueError):
    """A token file that cannot be used at start-up (missing, unreadable or empty)."""


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
    """``path``: exact, ``*`` standing for one path segment, or a prefix when it ends with ``/``.
    ``endpoint`` labels the metric."""

    method: str
    path: str
    level: Level
    endpoint: str

    def pattern(self) -> re.Pattern[str]:
        body = "/".join(re.escape(part) if part != "*" else "[^/]+" for part in self.path.split("/"))
        return re.compile(body + (".*" if self.path.endswith("/") else "") + r"\Z")


class AccessPolicy:
    """Which requests need which token; ``match`` is a dict lookup for exact paths (the hot path)."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)
        self._exact = {(r.method, r.path): r for r in self.rules if "*" not in r.path and not r.path.endswith("/")}
        self._patterns = [(r, r.pattern()) for r in self.rules if (r.method, r.path) not in self._exact]

    def match(self, method: str, path: str) -> Rule | None:
        rule = self._exact.get((method, path))
        if rule is not None:
            return rule
        for candidate, pattern in self._patterns:
            if candidate.method == method and pattern.match(path):
                return candidate
        return None

    def level_of(self, method: str, path: str) -> Level | None:
        rule = self.match(method, path)
        return None if rule is None else rule.level

    def paths(self, level: Level) -> list[str]:
        return [f"{r.method} {r.path}{'*' if r.path.endswith('/') else ''}" for r in self.rules if r.level is level]


Counter = Callable[[str, str], None]
STATUS = {Outcome.MISSING: 401, Outcome.INVALID: 403}
DETAIL = {Outcome.MISSING: "Missing bearer token (Authorization: Bearer <token>)",
          Outcome.INVALID: "Invalid bearer token"}
CHALLENGE = {Outcome.MISSING: "Bearer", Outcome.INVALID: 'Bearer error="invalid_token"'}


class BearerGuard:
    """ASGI middleware: requests matching the policy are checked before the app sees them."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, tokens: Tokens, count: Counter) -> None:
        self.app = app
        self.policy = policy
        self.tokens = tokens
        self.count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            rule = self.policy.match(scope["method"], scope["path"])
            if rule is not None:
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
