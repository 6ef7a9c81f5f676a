"""Offline lint of the Dockerfile (no Docker engine here): pinned bases, non-root, a real HEALTHCHECK, entry points
that the package installs, and a build context that holds everything COPY names."""

from __future__ import annotations

import fnmatch
import json
import re

from deploy_manifests import REPO, project_scripts, pyproject

from shared.predictor_settings import PredictorSettings

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continuation"
    return out


def final_stage() -> list[tuple[str, str]]:
    ins = instructions()
    last_from = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    return ins[last_from:]


def test_base_images_are_pinned() -> None:
    for word, rest in instructions():
        if word == "FROM":
            image = rest.split()[0]
            assert "@sha256:" in image or re.search(r":\d+\.\d+\.\d+[\w.-]*$", image), f"unpinned base {image}"
            assert image.startswith("python:3.11"), f"base {image}: the venv and CI run CPython 3.11"


def test_runs_as_a_non_root_user() -> None:
    users = [rest for word, rest in final_stage() if word == "USER"]
    assert users, "final stage has no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]
    assert user.isdigit(), "numeric USER so Kubernetes runAsNonRoot can verify it"
    deploy_uid = (REPO / "deploy" / "overlays" / "sidecar" / "router.yaml").read_text()
    assert f"runAsUser: {user}" in deploy_uid, "deploy/ pods must run as the image's user"


def test_cmd_and_entrypoint_name_installed_commands() -> None:
    scripts = project_scripts()
    stage = final_stage()
    cmds = [rest for word, rest in stage if word in ("CMD", "ENTRYPOINT")]
    assert [w for w, _ in stage if w == "CMD"], "no default CMD"
    for rest in cmds:
        argv = json.loads(rest)  # exec form only: signals reach the server, no shell
        assert argv[0] in scripts, f"{argv[0]} is not in [project.scripts]"
    (cmd,) = [json.loads(rest) for word, rest in stage if word == "CMD"]
    assert cmd[0] == "latency-predictor"


def test_healthcheck_probes_healthz_of_the_default_server() -> None:
    checks = [rest for word, rest in final_stage() if word == "HEALTHCHECK"]
    assert len(checks) == 1, "exactly one HEALTHCHECK"
    options, _, command = checks[0].partition("CMD")
    for option in ("--interval=", "--timeout=", "--retries="):
        assert option in options, f"HEALTHCHECK without {option}"
    argv = json.loads(command.strip())
    assert argv[:2] == ["python", "-c"], "probe with the image's own Python (no curl in slim images)"
    compile(argv[2], "<healthcheck>", "exec")
    assert "urllib.request" in argv[2] and "/healthz" in argv[2]
    default_port = str(PredictorSettings.model_fields["port"].default)
    assert f"'{default_port}'" in argv[2], "falls back to the predictor's default port (the default CMD)"


def test_exposes_the_server_ports() -> None:
    exposed = {p for word, rest in final_stage() if word == "EXPOSE" for p in rest.split()}
    assert {"8000", "8001", "8080"} <= exposed, exposed
    (cmd,) = [json.loads(rest) for word, rest in final_stage() if word == "CMD"]
    assert cmd[cmd.index("--port") + 1] in exposed


def test_installs_the_package_not_editable() -> None:
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert re.search(r"pip install [^&]*\.(\s|$)", runs), "pip install ."
    assert " -e " not in runs and "--editable" not in runs


def _dockerignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.removeprefix("**/")):
            ignored = not negate
    return ignored


def test_copy_sources_exist_and_cover_every_package() -> None:
    ignore = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    copied: set[str] = set()
    for word, rest in instructions():
        if word not in ("COPY", "ADD") or "--from=" in rest:
            continue
        assert word == "COPY", "use COPY, not ADD"
        *sources, _dest = rest.split()
        for source in sources:
            if any(ch in source for ch in "*?["):
                continue  # optional (glob) sources, e.g. README.m[d]
            assert (REPO / source).exists(), f"COPY {source}: not in the build context"
            assert not _dockerignored(source, ignore), f"COPY {source}: excluded by .dockerignore"
            copied.add(source.rstrip("/"))
    packages = {p.rstrip("*") for p in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, f"packages not copied into the image: {sorted(packages - copied)}"
    assert "pyproject.toml" in copied
