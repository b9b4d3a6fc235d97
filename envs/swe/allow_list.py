"""What of the agent's tree SWE-v0 grades: the allow-list of source files inside the package under test.

`gradable` keeps a changed path only when it is a regular source or data file inside a package directory
(`package_dirs`) and is no test, configuration, metadata, byte-code or hidden file; `envkit.envs.swe.grading`
builds the graded layer from what it keeps. Pure functions of paths (exact-value tests in
``tests/security/test_swe_verdict_rule.py``).
"""

from __future__ import annotations

import posixpath

SOURCE_SUFFIXES = frozenset(
    [
        ".py",
        ".pyi",
        ".pyx",
        ".pxd",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".txt",
        ".rst",
        ".md",
        ".json",
        ".csv",
        ".yaml",
        ".yml",
        ".html",
        ".js",
        ".css",
        ".xml",
        ".dat",
    ]
)
CONFIG_NAMES = frozenset(
    [
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "setup.cfg",
        "tox.ini",
        "pyproject.toml",
        "setup.py",
        "noxfile.py",
        "sitecustomize.py",
        "usercustomize.py",
        "pytest.py",
        "py.py",
        "_pytest",
        "pluggy",
    ]
)
TEST_DIRS = frozenset({"test", "tests", "testing"})
#: Directory suffixes never graded: installed-distribution metadata (entry points, ``pytest11`` plugins, ...).
METADATA_SUFFIXES = (".egg-info", ".dist-info", ".egg", ".egg-link", ".pth")


def is_test_path(rel: str, test_files: frozenset[str] = frozenset()) -> bool:
    """True for paths pytest would treat as tests or their support (never taken from the agent)."""
    parts = rel.split("/")
    name = parts[-1]
    return (
        rel in test_files
        or any(p in TEST_DIRS for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name in ("test.py", "tests.py")
    )


def package_dirs(
    tree_names: frozenset[str], has_init: frozenset[str], gold_paths: tuple[str, ...] = ()
) -> frozenset[str]:
    """The package directories of a repository (repository-relative, no trailing slash).

    Args:
        tree_names: Top-level names of the pristine tree, plus ``src/<name>`` for its ``src`` layout entries.
        has_init: Those of `tree_names` that are directories holding an ``__init__.py``.
        gold_paths: Files the task's gold patch edits: the directory holding each (below the top level, or below
            ``src/<name>``) is a package directory too (namespace packages, packages without ``__init__.py``).
    """
    out = {d for d in has_init if _package_name_ok(d)}
    for rel in gold_paths:
        parts = rel.split("/")
        top = "/".join(parts[:2]) if parts[0] == "src" and len(parts) > 2 else parts[0]
        if len(parts) > len(top.split("/")) and top in tree_names and _package_name_ok(top):
            out.add(top)
    return frozenset(out)


def _package_name_ok(rel_dir: str) -> bool:
    name = rel_dir.split("/")[-1]
    return not (name.startswith(".") or name in TEST_DIRS or name in CONFIG_NAMES or name.endswith(METADATA_SUFFIXES))


def gradable(rel: str, packages: frozenset[str], test_files: frozenset[str] = frozenset()) -> bool:
    """True when the agent's version of `rel` is used for grading: the allow-list of the module docstring.

    Args:
        rel: Repository-relative path.
        packages: The package directories (`package_dirs`).
        test_files: The task's test files (never taken from the agent).
    """
    parts = rel.split("/")
    if not parts or any(
        not p or p.startswith(".") or p == "__pycache__" or p in CONFIG_NAMES or p.endswith(METADATA_SUFFIXES)
        for p in parts
    ):
        return False
    if not any(rel.startswith(pkg + "/") for pkg in packages) or is_test_path(rel, test_files):
        return False
    return posixpath.splitext(parts[-1])[1] in SOURCE_SUFFIXES
