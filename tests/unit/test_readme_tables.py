"""The measured tables in README.md and docs/*.md are rendered from saved results: a figure and its source
cannot disagree."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def renderer():
    spec = importlib.util.spec_from_file_location("render_readme", ROOT / "benchmarks" / "render_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_matches_its_saved_result():
    module = renderer()
    files = module.render_files(module.documents())
    assert ROOT / "README.md" in files, "README has no rendered block (its headline of key figures)"
    assert any(path.parent.name == "docs" for path in files), "docs/ has no rendered tables"
    stale = {str(path.relative_to(ROOT)): changed for path, (_new, changed) in files.items() if changed}
    assert stale == {}, f"tables out of date: run python benchmarks/render_readme.py --write ({stale})"
    names = [name for path in files for name in module.BLOCK.findall(path.read_text())]
    names = [match[1] for match in names]
    assert len(names) == len(set(names)), f"a block appears twice: {names}"
    for name in module.RENDERERS:
        source = module.SOURCES.get(name, name)
        saved = json.loads((ROOT / "benchmarks" / "results" / f"{source}.json").read_text())
        # a command a reader can run again: the workbench CLI, or the script that runs the browser test
        assert saved["command"].startswith(("workbench ", "python benchmarks/")), name
        assert name in names, f"{name} has a renderer but no block in README.md or docs/*.md"


def block_file(module, name: str) -> Path:
    """The document that holds block ``name``."""
    return next(path for path in module.documents() if f"<!-- table: {name} -->" in path.read_text())


def test_a_changed_number_is_caught(tmp_path, monkeypatch):
    module = renderer()
    name = "ps-vs-allreduce-reduced"
    text = block_file(module, name).read_text()
    saved = module.load(name)
    saved["result"]["efficiency"][0]["images_per_s"] += 1.0
    real_load = module.load
    monkeypatch.setattr(module, "load", lambda asked: saved if asked == name else real_load(asked))
    _new, changed = module.rendered(text)
    assert changed == [name]


def test_a_tampered_block_fails_the_check_in_any_document(tmp_path, monkeypatch, capsys):
    """A number edited by hand inside a docs page's block: ``--check`` exits 1 naming it, ``--write`` restores it."""
    module = renderer()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    monkeypatch.setattr(module, "ROOT", tmp_path)  # results are still read from the real benchmarks/results
    page = tmp_path / "docs" / block_file(module, "allreduce").name
    original = page.read_text()
    block = re.search(r"<!-- table: allreduce -->\n.*?<!-- /table -->", original, re.S)
    assert block and "| 1 024 |" in block[0]
    page.write_text(original.replace(block[0], block[0].replace("| 1 024 |", "| 2 048 |", 1)))
    assert module.main(["--check"]) == 1
    assert f"docs/{page.name}: allreduce" in capsys.readouterr().out
    assert module.main(["--write"]) == 0 and page.read_text() == original
    assert module.main(["--check"]) == 0


def test_case_prose_is_the_case_own_text():
    """A case's bullets are its ``Case.text`` (via the registry), so the docs and the notebook say the same."""
    module = renderer()
    from workbench.experiment import get_case

    for name in ("eval-frequency-reduced", "input-pipeline-reduced", "pop-scaling-reduced"):
        saved = module.load(name)
        text = get_case(saved["result"]["case"]).text(saved["result"]).strip()
        assert text and text in module.renderer(name, saved)(saved), name


def test_a_case_without_a_renderer_gets_its_headline_and_text(monkeypatch):
    """A new case needs no code in the renderer: its block renders its saved headline table and its text."""
    from dataclasses import replace

    from docsbench import cases

    module = renderer()
    name = "predict-leak-reduced"
    docs = cases.case_docs("predict-leak")
    assert name in docs.tables  # the case renders its own table ...
    monkeypatch.setitem(cases._registered(), "predict-leak", replace(docs, tables={}))  # ... and without it
    saved = module.load(name)
    body = module.renderer(name, saved)(saved)
    header = "| " + " | ".join(saved["result"]["headline"][0]) + " |"
    assert body.startswith(header) and "**leak**" in body and body.endswith(module.source_line(saved))
    with pytest.raises(SystemExit, match="no renderer"):
        module.renderer("not-a-case", {"result": [1, 2]})


def test_readme_is_short_and_its_links_resolve():
    """The README stays a front page (its topics live in docs/), and no link between the pages is broken."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)", path.read_text()):
            # the dashboard screenshot is added by hand (docs/images/), and web links are not checked here
            if target.startswith(("http://", "https://")) or "images/" in target:
                continue
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to a missing {target}"


def test_number_formats():
    module = renderer()
    assert [module.number(v) for v in (33.929, 177.0, 0.00103, 1234.5, None)] == [
        "33.9",
        "177",
        "0.00103",
        "1 234",
        "–",
    ]
    from docsbench.markdown import percent

    assert percent(0.499) == "50 %"
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


def test_every_saved_result_is_a_registered_measurement_of_its_command():
    """One registry (``docsbench.registry.measurements``: the benchmarks' and each case's) feeds the measurement
    script and holds every result the renderer reads, each with the command it was saved from."""
    from docsbench.registry import measurements

    registered = [m for m in measurements() if not m.sweep]
    by_name = {m.name: m for m in registered}
    assert len(by_name) == len(registered), "a saved result is registered twice"
    saved = {path.stem: json.loads(path.read_text()) for path in (ROOT / "benchmarks" / "results").glob("*.json")}
    unregistered = sorted(set(saved) - set(by_name))
    assert not unregistered, (

        f"saved results without a Measurement (docsbench.registry or a case's docsbench.cases module): {unregistered}"

    )
    never_saved = sorted(set(by_name) - set(saved))
    assert not never_saved, f"measurements never saved: {never_saved}"
    other = [name for name, one in saved.items() if not by_name[name].same_command(one["command"])]
    assert not other, f"saved from another command than registered: {other}"
    sweeps = [m for m in measurements() if m.sweep]
    assert all("--out artifacts/" in m.command for m in sweeps), "a sweep's runs land where a table reads them"
    assert len({m.command for m in sweeps}) == len(sweeps), "a sweep registered twice"


def test_a_command_is_the_same_wherever_its_runs_land():
    from docsbench.markdown import Measurement, varied

    one = Measurement("x", "workbench run eval-frequency --preset ci --out artifacts/a --json")
    assert one.same_command("workbench run eval-frequency --preset ci --out /tmp/b --json")
    assert one.same_command("workbench run eval-frequency --preset ci --json  # kept from a run by hand")
    assert not one.same_command("workbench run eval-frequency --preset reduced --json")
    made = varied(Measurement("n-{link}", "--link {link} -r{repetition}"), repetition=("1", "2"), link=("a", "b"))
    assert [(m.name, m.command, m.round) for m in made] == [
        ("n-a", "--link a -r1", 0),
        ("n-b", "--link b -r1", 0),
        ("n-a", "--link a -r2", 1),
        ("n-b", "--link b -r2", 1),
    ]


def test_measure_runs_the_registered_commands_saves_each_and_says_what_failed(tmp_path, monkeypatch, capsys):
    import docsbench.registry
    from docsbench.markdown import Measurement

    module = renderer()
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(module, "documents", lambda root=None: [])
    registry = [
        Measurement("tiny", "python -c 'import json; print(json.dumps({\"answer\": 42}))'"),
        Measurement("swept", f"touch {tmp_path}/swept-ran", sweep=True),
        Measurement("words", "echo not json"),
        Measurement("old", "false", kept="a state of the code that is gone"),
    ]
    monkeypatch.setattr(docsbench.registry, "measurements", lambda: registry)
    assert module.measure([]) == 1  # "words" printed no JSON
    saved = json.loads((tmp_path / "results" / "tiny.json").read_text())
    assert saved["result"] == {"answer": 42} and saved["command"] == registry[0].command
    assert (tmp_path / "swept-ran").exists() and not (tmp_path / "results" / "swept.json").exists()
    assert not (tmp_path / "results" / "words.json").exists() and not (tmp_path / "results" / "old.json").exists()
    assert "words failed: no JSON on its output" in capsys.readouterr().err
    assert module.measure(["tiny"]) == 0
    with pytest.raises(SystemExit, match="no measurement 'nope'"):
        module.measure(["nope"])


def test_a_case_writes_its_clause_of_the_readme_headline(monkeypatch):
    """The README's lines on the case studies are the cases' own clauses (``CaseDocs.readme_clause``), joined per
    line in the cases' order; a case whose results are not saved writes none."""
    from dataclasses import replace

    from docsbench import cases
    from docsbench.markdown import ReadmeClause

    module = renderer()
    lines, sources = module.case_lines()
    assert [line.split(":**")[0] for line in lines] == [
        "- **Case studies on nodes",
        "- **Parameter servers and CPU tuning on nodes",
    ]
    assert sources == [
        "eval-frequency-nodes-1gbit",
        "pop-scaling-nodes-1gbit",
        "ps-vs-allreduce-nodes-1gbit",
        "ps-vs-allreduce-nodes-unshaped",
        "cpu-tuning-nodes",
    ]
    registered = cases._registered()
    leak = replace(
        registered["predict-leak"], readme_clause=lambda results: ReadmeClause("Leaks", "none found", ("x",))
    )
    monkeypatch.setitem(registered, "predict-leak", leak)
    monkeypatch.setitem(registered, "cpu-tuning", replace(registered["cpu-tuning"], readme_clause=None))
    lines, sources = module.case_lines()
    assert lines[1] == "- **Leaks:** none found." and sources[2] == "x" and "cpu-tuning-nodes" not in sources
    assert lines[2].startswith("- **Parameter servers and CPU tuning on nodes:** on ")
    assert lines[2].endswith("modelled).")
