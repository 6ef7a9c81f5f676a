"""shared.auth: token sources (env, file, re-read on change), the check per level, policy matching."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from shared.auth import AccessPolicy, Level, Outcome, Rule, TokenConfigError, Tokens, TokenSource, bearer
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
                           Rule("GET", "/model/*/download", Level.READ, "model_download"),
                           Rule("GET", "/bundle/", Level.READ, "bundle")])
    assert policy.level_of("POST", "/flush") is Level.WRITE
    assert policy.level_of("GET", "/flush") is None
    assert policy.level_of("GET", "/model/ttft/download") is Level.READ
    assert policy.level_of("GET", "/model/download/info") is None
    assert policy.level_of("GET", "/model/a/b/download") is None
    assert policy.level_of("GET", "/bundle/v/3/ttft.ubj") is Level.READ
    assert policy.level_of("GET", "/bundles") is None
    assert policy.paths(Level.WRITE) == ["POST /flush"]
