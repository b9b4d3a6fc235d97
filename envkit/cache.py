"""Where envkit keeps what it builds once and reuses: one root for every cache.

``$ENVKIT_CACHE``, else ``$XDG_CACHE_HOME/envkit``, else ``~/.cache/envkit``. Under it: ``alfworld/`` (game
files built from the ALFWorld data) and ``models/`` (GGUF files converted to model folders; ``$ENVKIT_MODEL_CACHE``
overrides that one), ``keys/`` (`install_key`: secret keys that authenticate cache entries). `.ci/run` points all of them at a fresh temporary folder (docs/install.md, "Caches").
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """``$ENVKIT_CACHE``, else ``$XDG_CACHE_HOME/envkit``, else ``~/.cache/envkit``."""
    if os.environ.get("ENVKIT_CACHE"):
        return Path(os.environ["ENVKIT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "envkit"


def install_key(name: str) -> bytes:
    """This install's secret key `name` (32 random bytes), made on first use.

    Kept in ``<cache_root()>/keys/<name>.key`` (folder 0700, file 0600, linked into place whole), apart from the
    caches it authenticates, so that a file planted in a cache folder cannot carry a valid tag. A key file that
    is not a regular file owned by this user and private to it is refused (`PermissionError` naming the file
    and how to fix it: remove it, a new key is made and every entry it signed is rebuilt).
    """
    folder = cache_root() / "keys"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{name}.key"
    if not os.path.lexists(path):  # written whole under a private name, then linked: readers never see it half
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process made it first: use theirs
        finally:
            os.unlink(tmp)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise PermissionError(
                f"the key file {path} is not a regular file private to this user (uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}); remove it and a new key is made (cache entries it signed are rebuilt)"
            )
        key = f.read()
    if len(key) < 32:
        raise PermissionError(f"the key file {path} is truncated ({len(key)} bytes); remove it and a new key is made")
    return key
