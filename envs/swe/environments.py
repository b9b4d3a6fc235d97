"""Per-task environments: which interpreter, site-packages or image a task's commands and tests run with.

A `SweTask` without an environment runs against the host's Python (as before). A `TaskEnvironment` names one of:

- an **envkit environment** (`TaskEnvironment.name`): a pinned requirements file
  ``envs/swe/tasks/<name>.requirements.txt`` (plus ``<name>.apt.txt``, the Debian packages of its image) from which
  ``python scripts/make_swe_env.py <name>`` builds, offline at run time, both
  a **prefix** (a venv under `envs_dir`, for the local bubblewrap backend: bound read-only *instead of* the host's
  site-packages) and an **image** (a rootfs assembled from those Debian packages and pip wheels, then imported
  with ``podman import``/``docker import``; for the docker backend). Their names carry a hash of the spec, so a
  changed spec is never served by a stale build.
- an **image** (`TaskEnvironment.image`): any local image, e.g. a SWE-bench / SWE-Gym / R2E-Gym instance image,
  with the repository at `TaskEnvironment.workdir` (``/testbed`` there) and the test interpreter's directory in
  `TaskEnvironment.path` (``/opt/miniconda3/envs/testbed/bin`` in SWE-bench images).
- a **prefix** (`TaskEnvironment.prefix`): any venv directory.

Nothing is pulled at run time: a missing image or prefix raises `SandboxError` naming the command that builds it.
"""

from __future__ import annotations

import configparser
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envkit.envs.swe.sandbox_facts import SYSTEM_DIRS, WORKDIR, SandboxError

SPECS_DIR = Path(__file__).resolve().parent / "tasks"
BUILD = "python scripts/make_swe_env.py"
IMAGE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BUILDER_VERSION = 2  # part of every spec hash: bump when env_build changes what it builds
SWEBENCH_WORKDIR = "/testbed"
SWEBENCH_PATH = ("/opt/miniconda3/envs/testbed/bin", "/opt/miniconda3/bin")


def envs_dir() -> Path:
    """Where envkit environments' prefixes live: ``$ENVKIT_SWE_ENVS``, else ``/var/cache/envkit/swe-envs``."""
    return Path(os.environ.get("ENVKIT_SWE_ENVS") or "/var/cache/envkit/swe-envs")


def spec_files(name: str) -> tuple[Path, Path]:
    """The requirements and apt package files of envkit environment `name`."""
    return SPECS_DIR / f"{name}.requirements.txt", SPECS_DIR / f"{name}.apt.txt"


def spec_hash(name: str) -> str:
    """12 hex digits identifying the spec of envkit environment `name` (its requirements and apt lists, and
    `BUILDER_VERSION`)."""
    req, apt = spec_files(name)
    if not req.exists():
        raise SandboxError(
            f"environment {name!r} has no spec: {req} is missing (an envkit environment is a pinned "
            f"requirements file next to the task set)"
        )
    h = hashlib.sha256(f"builder {BUILDER_VERSION}\0".encode() + req.read_bytes())
    if apt.exists():
        h.update(b"\0" + apt.read_bytes())
    return h.hexdigest()[:12]


def _image_tag(name: str) -> str:
    return "envkit-swe-" + name.lower().replace("_", "-")


@dataclass(frozen=True)
class TaskEnvironment:
    """Where a task's commands and tests run (see the module docstring; empty fields: not used).

    Attributes:
        name: envkit environment built by ``scripts/make_swe_env.py`` (gives both a prefix and an image).
        image: Container image (docker backend), overriding the one `name` gives.
        workdir: Repository path inside the image (the work tree is bound there and at ``/repo``).
        path: Directories put first on ``PATH`` inside the image (where the tests' ``python`` is).
        prefix: venv directory (local backend), overriding the one `name` gives.
    """

    name: str = ""
    image: str = ""
    workdir: str = WORKDIR
    path: tuple[str, ...] = ()
    prefix: str = ""

    def __post_init__(self) -> None:
        if not (self.name or self.image or self.prefix):
            raise ValueError("TaskEnvironment needs a name, an image or a prefix")
        if not self.workdir.startswith("/") or any(not p.startswith("/") for p in self.path):
            raise ValueError(f"TaskEnvironment workdir and path must be absolute, got {self.workdir!r}, {self.path!r}")

    def image_name(self) -> str:
        """The image (``""`` when the environment has none)."""
        if self.image:
            return self.image
        return f"{_image_tag(self.name)}:{spec_hash(self.name)}" if self.name else ""

    def prefix_dir(self) -> Path | None:
        """The venv directory for the local backend (None when the environment has none)."""
        if self.prefix:
            return Path(self.prefix)
        return envs_dir() / f"{self.name}-{spec_hash(self.name)}" if self.name else None

    def build_hint(self, what: str) -> str:
        """The command that makes this environment's `what` (``"image"`` or ``"prefix"``) exist."""
        if self.name and not (what == "image" and self.image) and not (what == "prefix" and self.prefix):
            return f"{BUILD} {self.name} --{what}"
        if what == "image":
            return (
                f"load it into the engine first (envkit never pulls): on a machine with registry access "
                f"`docker pull {self.image} && docker save {self.image} -o img.tar`, here `podman load -i img.tar`"
            )
        return f"python -m venv {self.prefix} && {self.prefix}/bin/pip install -r <the task's requirements>"

    def to_record(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "image": self.image, "workdir": self.workdir}
        d |= {"path": list(self.path), "prefix": self.prefix}
        return {k: v for k, v in d.items() if v and not (k == "workdir" and v == WORKDIR)}


def environment_from_record(rec: Mapping[str, Any], *, image_template: str = "") -> TaskEnvironment | None:
    """The environment a task record names (None: the host's Python).

    Read, in order: envkit's ``environment`` object (fields of `TaskEnvironment`); an image name in
    ``image_name`` (SWE-smith), ``docker_image`` (R2E-Gym, SWE-rebench) or ``image``; else `image_template`
    formatted with the record (SWE-bench / SWE-Gym derive the name from the id, see `swebench_image`).
    Image records get SWE-bench's layout (``/testbed``, conda's ``testbed`` env on PATH) unless the record's
    ``workdir``/``env_path`` say otherwise.
    """
    env = rec.get("environment")
    if isinstance(env, Mapping) and env:
        return TaskEnvironment(
            name=str(env.get("name", "")),
            image=str(env.get("image", "")),
            workdir=str(env.get("workdir") or WORKDIR),
            path=tuple(str(p) for p in env.get("path") or ()),
            prefix=str(env.get("prefix", "")),
        )
    image = next((str(rec[k]) for k in ("image_name", "docker_image", "image") if rec.get(k)), "")
    if not image and image_template:
        image = swebench_image(str(rec["instance_id"]), image_template)
    if not image:
        return None
    path = rec.get("env_path")
    return TaskEnvironment(
        image=image,
        workdir=str(rec.get("workdir") or SWEBENCH_WORKDIR),
        path=tuple(str(p) for p in path) if isinstance(path, list | tuple) else SWEBENCH_PATH,
    )


def swebench_image(instance_id: str, template: str = "swebench/sweb.eval.x86_64.{id}:latest") -> str:
    """SWE-bench's instance image name: ``{id}`` is the instance id with ``__`` written ``_1776_``, lower case
    (the harness's convention; SWE-Gym's images use the same with another namespace, e.g.
    ``xingyaoww/sweb.eval.x86_64.{id}``). ``{instance_id}`` is the raw id."""
    return template.format(id=instance_id.replace("__", "_1776_").lower(), instance_id=instance_id)


def venv_roots(prefix: Path) -> list[str]:
    """Directories the sandbox must show for venv `prefix` to run: the venv and its base interpreter's prefix.

    Raises:
        SandboxError: `prefix` is not a venv (no ``pyvenv.cfg`` / ``bin/python``).
    """
    cfg = prefix / "pyvenv.cfg"
    if not cfg.exists() or not (prefix / "bin" / "python").exists():
        raise SandboxError(f"{prefix} is not a built environment (no pyvenv.cfg or bin/python)")
    parser = configparser.ConfigParser()
    parser.read_string("[venv]\n" + cfg.read_text())
    home = parser.get("venv", "home", fallback="")
    if parser.get("venv", "include-system-site-packages", fallback="false").strip().lower() == "true":
        raise SandboxError(f"{prefix} includes the system site-packages; rebuild it without them")
    base = os.path.realpath(os.path.dirname(home)) if home else ""
    roots = {os.path.realpath(prefix), *([base] if base else [])}
    return sorted(r for r in roots if not any(r == d or r.startswith(d + "/") for d in SYSTEM_DIRS))


def engine_cli() -> str:
    """The container engine's command line tool (``$ENVKIT_SWE_ENGINE``, else podman, else docker)."""
    import shutil

    for name in (os.environ.get("ENVKIT_SWE_ENGINE", ""), "podman", "docker"):
        if name and shutil.which(name):
            return name
    raise SandboxError("no container engine CLI: apt-get install podman runc (or docker)")


def export_image_dir(image: str, directory: str, out: str) -> None:
    """Copy `directory` of local image `image` (e.g. SWE-bench's ``/testbed``) into `out` (``image:`` sources):
    through ``podman image mount`` where it works (root), else ``create`` + ``export`` (hard links skipped).

    Raises:
        SandboxError: the image is not local (the message says how to load it) or holds no such directory.
    """
    import shutil
    import subprocess
    import tarfile

    cli = engine_cli()
    if cli == "podman":  # as root: mount the image read-only and copy only `directory` (no full export)
        mounted = subprocess.run([cli, "image", "mount", image], capture_output=True, text=True, check=False)
        if mounted.returncode == 0 and mounted.stdout.strip():
            try:
                src = os.path.join(mounted.stdout.strip(), directory.strip("/"))
                if not os.path.isdir(src):
                    raise SandboxError(f"image {image} has nothing under {directory}")
                shutil.copytree(src, out, symlinks=True, dirs_exist_ok=True)
            finally:
                subprocess.run([cli, "image", "unmount", image], capture_output=True, check=False)
            return
    made = subprocess.run([cli, "create", image, "true"], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise SandboxError(
            f"{cli} create {image} failed ({made.stderr.strip()[-300:]}): "
            + TaskEnvironment(image=image).build_hint("image")
        )
    cid = made.stdout.strip().splitlines()[-1]
    prefix = directory.strip("/") + "/"
    found = False
    try:
        with subprocess.Popen([cli, "export", cid], stdout=subprocess.PIPE) as proc:
            assert proc.stdout is not None
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    name = member.name.lstrip("./")
                    if not name.startswith(prefix) or member.islnk():
                        continue
                    found = True
                    member.name = name[len(prefix) :]
                    tar.extract(member, out, filter="data")
    finally:
        subprocess.run([cli, "rm", "-f", cid], capture_output=True, check=False)
    if not found:
        raise SandboxError(f"image {image} has nothing under {directory}")
