"""The installed packages against the versions coevo asks for.

coevo's package metadata carries pyproject.toml's bounds: the lowest versions the whole suite
has passed on (docs/development.md#versions). pip keeps to them at install time; a package
changed since (a downgrade, `--no-deps`) is only found by this check, which the `coevo`
command runs before anything else: below its bound a package fails far from its cause (a cache
method that takes one argument fewer, a compiled step that quietly falls back to eager)."""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import Requirement


def outdated(distribution: str = "coevo") -> list[str]:
    """One line per installed requirement of `distribution` (its extras left out) whose
    version is outside its bound, e.g. "transformers 4.56.0 (coevo needs >=5.6)"; none for a
    requirement that is not installed (its import says so) or where `distribution` has no
    metadata (run from a source tree on PYTHONPATH)."""
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return []
    lines = []
    for text in requires:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            lines.append(
                f"{requirement.name} {installed} ({distribution} needs {requirement.specifier})"
            )
    return lines
