"""The YAML reader's limits (issue #27, item 5): an alias bomb, deep nesting and a mapping used
as a key are each a ConfigError naming the file and what was refused, found before the cost.

The alias bomb is the "billion laughs" shape from the finding (468 bytes took 2.46 GB and 48 s
through ``corral validate``); go-yaml's ``TestLimits`` in ``limit_test.go`` exercises the same
shapes (many aliases, deep flow nesting), translated here, not copied."""

from __future__ import annotations

import itertools
import resource
from pathlib import Path

import pytest

from corral.shared.configio import ConfigError, YamlLimits, load_file, parse_text

LETTERS = "abcdefghi"
BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in itertools.pairwise(LETTERS)]
)


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_the_alias_bomb_is_refused_quickly_and_cheaply() -> None:
    assert len(BOMB.encode()) < 600  # the finding's size class
    before = _max_rss_mib()
    with pytest.raises(ConfigError) as err:
        parse_text(BOMB, "bomb.yaml")
    assert _max_rss_mib() - before < 200
    text = str(err.value)
    assert text.startswith("bomb.yaml:")
    assert "an alias bomb" in text


def test_the_absolute_expanded_cap() -> None:
    limits = YamlLimits(max_nodes=500, max_alias_ratio=1_000_000)
    text = "a: &a [" + ", ".join(["x"] * 100) + "]\nb: [*a, *a, *a, *a, *a, *a]\n"
    with pytest.raises(ConfigError, match="more than 500 values once aliases are expanded"):
        parse_text(text, "cap.yaml", limits=limits)


def test_many_aliases_are_refused_by_count() -> None:
    text = "a: &a x\nb: [" + ", ".join(["*a"] * 1001) + "]\n"
    with pytest.raises(ConfigError, match="more than 1000 aliases"):
        parse_text(text, "many.yaml")


def test_a_few_aliases_and_merge_keys_still_read() -> None:
    text = "base: &base {cpus: 2, region: us-east-1}\nhead: {<<: *base, name: h}\nw: *base\n"
    doc = parse_text(text, "ok.yaml")
    assert doc.data["head"] == {"cpus": 2, "region": "us-east-1", "name": "h"}
    assert doc.data["w"] == {"cpus": 2, "region": "us-east-1"}


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_a_config_error_not_a_crash(opener: str, closer: str) -> None:
    text = opener * 5000 + "1" + closer * 5000
    with pytest.raises(ConfigError, match="nested deeper than 100 levels"):
        parse_text(text, "deep.yaml")


def test_deep_json_falls_back_without_a_crash() -> None:
    # A text YAML refuses is read again as JSON; deep JSON must not crash that path either.
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ConfigError):
        parse_text(text, "deep.json")


def test_nesting_made_deep_through_aliases_is_refused() -> None:
    lines = ["l0: &l0 [x]"] + [f"l{i}: &l{i} [*l{i - 1}]" for i in range(1, 150)]
    with pytest.raises(ConfigError, match="deeper than"):
        parse_text("\n".join(lines), "aliasdeep.yaml")


@pytest.mark.parametrize("text", ["{a: 1}: 2\n", "? {a: 1}\n: 2\n", "? [a, {b: 1}]\n: 2\n"])
def test_a_collection_as_a_key_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="a key must be a plain value"):
        parse_text(text, "key.yaml")


def test_the_size_limit() -> None:
    with pytest.raises(ConfigError, match="more than the 10"):
        parse_text("a: 123456789012\n", "big.yaml", limits=YamlLimits(max_bytes=10))


def test_the_cli_reader_uses_the_limits(tmp_path: Path) -> None:
    f = tmp_path / "bomb.yaml"
    f.write_text(BOMB)
    with pytest.raises(ConfigError) as err:
        load_file(f)
    assert str(f) in str(err.value)


def test_corral_validate_refuses_the_bomb_with_exit_2(tmp_path: Path) -> None:
    # The finding: `corral validate` on 468 bytes took 2.46 GB and 48 s.
    import subprocess
    import sys

    f = tmp_path / "bomb.yaml"
    f.write_text(BOMB)
    done = subprocess.run(
        [sys.executable, "-m", "corral.services.cli.main", "validate", str(f)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"{f}:" in done.stdout + done.stderr and "alias bomb" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
