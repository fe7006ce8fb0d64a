"""README tables are rendered from saved results: a figure and its source cannot disagree."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def renderer():
    spec = importlib.util.spec_from_file_location("render_readme", ROOT / "benchmarks" / "render_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_readme_table_matches_its_saved_result():
    module = renderer()
    text = (ROOT / "README.md").read_text()
    blocks = module.BLOCK.findall(text)
    assert blocks, "README has no rendered tables"
    _new, changed = module.rendered(text)
    assert changed == [], f"README tables out of date: run python benchmarks/render_readme.py --write ({changed})"
    for name in module.RENDERERS:
        source = module.SOURCES.get(name, name)
        saved = json.loads((ROOT / "benchmarks" / "results" / f"{source}.json").read_text())
        # a command a reader can run again: the workbench CLI, or the script that runs the browser test
        assert saved["command"].startswith(("workbench ", "python benchmarks/")), name
        assert f"<!-- table: {name} -->" in text, f"{name} has a renderer but no block in the README"


def test_a_changed_number_is_caught(tmp_path, monkeypatch):
    module = renderer()
    text = (ROOT / "README.md").read_text()
    name = "ps-vs-allreduce-reduced"
    saved = module.load(name)
    saved["result"]["efficiency"][0]["images_per_s"] += 1.0
    real_load = module.load
    monkeypatch.setattr(module, "load", lambda asked: saved if asked == name else real_load(asked))
    _new, changed = module.rendered(text)
    assert changed == [name]


def test_number_formats():
    module = renderer()
    assert [module.number(v) for v in (33.929, 177.0, 0.00103, 1234.5, None)] == [
        "33.9",
        "177",
        "0.00103",
        "1 234",
        "–",
    ]
    assert module.percent(0.499) == "50 %"
    with pytest.raises(SystemExit, match="is missing"):
        module.load("no-such-result")


def test_save_keeps_the_command_its_duration_and_the_load(tmp_path, monkeypatch):
    module = renderer()
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    output = tmp_path / "out.json"
    output.write_text(json.dumps({"seconds": 2.5}))
    path = module.save("example", output, "workbench bench analysis --json", seconds=12.0)
    saved = json.loads(path.read_text())
    assert path == tmp_path / "results" / "example.json"
    assert saved["result"] == {"seconds": 2.5} and saved["command"] == "workbench bench analysis --json"
    assert saved["seconds"] == 12.0 and len(saved["load_average"]) == 3
    assert "load average" in module.source_line(saved)
