"""`scriptorium train …` (train/cli.py): every `python -m train.<module>` entry point is a
subcommand, each subcommand's `--help` is its own parser's, and an unknown recipe is refused in
one line.

Does not cover: what the recipes train (tests/test_train.py, test_masked_lm.py, …).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from train import cli

TRAIN_DIR = Path(__file__).resolve().parent.parent / "train"
DISPATCHERS = {"cli.py", "__main__.py"}  # train/cli.py and `python -m train`: the command itself


def entry_point_modules() -> set[str]:
    """The modules under train/ that run as `python -m train.<module>`."""
    main_guard = re.compile(r"^if __name__ == .__main__.:", re.MULTILINE)
    return {
        ".".join(("train", *path.relative_to(TRAIN_DIR).with_suffix("").parts))
        for path in TRAIN_DIR.rglob("*.py")
        if path.relative_to(TRAIN_DIR).as_posix() not in DISPATCHERS
        and main_guard.search(path.read_text())
    }


SUBCOMMANDS = [
    *([recipe] for recipe in cli.RECIPES),
    *(["ship", recipe] for recipe in cli.RECIPES),
    *(list(words) for words in cli.COMMANDS),
]


def test_every_train_entry_point_is_a_subcommand():
    reachable = {module for module, _ in cli.COMMANDS.values()}
    assert entry_point_modules() - reachable == set()
    assert reachable - entry_point_modules() == set()


def test_the_listing_names_every_recipe_and_command(capsys):
    assert cli.main([]) == 0
    listing = capsys.readouterr().out
    listed = {line.split("  ")[1].strip() for line in listing.splitlines() if line[:2] == "  "}
    assert listed == {*cli.RECIPES, *(" ".join(words) for words in cli.COMMANDS)}
    assert cli.main(["--help"]) == 0
    assert capsys.readouterr().out == listing


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=" ".join)
def test_each_subcommand_shows_its_own_help(words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*words, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


def test_an_unknown_recipe_exits_2_with_one_line(capsys):
    assert cli.main(["bible-llm", "--tiny"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "scriptorium train: unknown recipe 'bible-llm' (`scriptorium train` lists them)\n"
    )


def test_python_m_train_and_the_old_module_commands_still_run():
    unknown = subprocess.run(
        [sys.executable, "-m", "train", "nope"], capture_output=True, text=True, timeout=60
    )
    assert unknown.returncode == 2
    assert len(unknown.stderr.splitlines()) == 1
    old = subprocess.run(
        [sys.executable, "-m", "train.spurgeon", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert old.returncode == 0
    assert old.stdout.startswith("usage: python -m train.spurgeon")
