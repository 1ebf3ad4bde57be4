"""The installed packages against coevo's bounds, and the command's warning below them."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest

from coevo import cli, versions


def fake_metadata(monkeypatch, requires, installed):
    def fake_requires(name):
        if requires is None:
            raise metadata.PackageNotFoundError(name)
        return requires

    def fake_version(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(versions.metadata, "requires", fake_requires)
    monkeypatch.setattr(versions.metadata, "version", fake_version)


def test_only_installed_requirements_outside_their_bounds_are_named(monkeypatch):
    requires = [
        "torch>=2.10",
        "transformers>=5.6",
        "typer>=0.16",
        "gguf>=0.18",
        'trl>=1.15; extra == "dev"',
    ]
    installed = {"torch": "2.13.0+cpu", "transformers": "4.56.0", "typer": "0.16.0", "trl": "1.0"}
    fake_metadata(monkeypatch, requires, installed)
    # A local version label passes; an extra's and a missing package's requirements are not
    # this check's: pip and the import say those.
    assert versions.outdated() == ["transformers 4.56.0 (coevo needs >=5.6)"]


def test_a_source_tree_without_metadata_is_not_checked(monkeypatch):
    fake_metadata(monkeypatch, None, {})
    assert versions.outdated() == []


def test_this_environment_keeps_to_coevos_bounds():
    assert versions.outdated() == []


def test_the_command_warns_in_one_line_before_it_runs(monkeypatch, capsys):
    monkeypatch.setattr(cli, "outdated", lambda: ["transformers 4.56.0 (coevo needs >=5.6)"])
    monkeypatch.setattr(sys, "argv", ["coevo", "env", "list"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 0
    captured = capsys.readouterr()
    warning = (
        "warning: installed below coevo's bounds: transformers 4.56.0 (coevo needs >=5.6); "
        "what fails below them: docs/development.md#versions."
    )
    assert captured.err.strip() == warning
    assert "shop" in captured.out
