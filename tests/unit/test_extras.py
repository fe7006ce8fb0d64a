"""Each part beyond the core install names, in one line, the package and the extra it lacks."""

from __future__ import annotations

import pytest

from workbench import extras


@pytest.fixture
def without(monkeypatch):
    """``without("ipyparallel", ...)``: those modules count as not installed."""

    def hide(*modules: str) -> None:
        real = extras.installed
        monkeypatch.setattr(extras, "installed", lambda module: module not in modules and real(module))

    return hide


def test_a_missing_extra_is_one_line_with_the_package_and_the_extra(without):
    without("ipyparallel")
    with pytest.raises(extras.MissingExtra) as caught:
        extras.require("cluster", for_what="Cluster")
    line = str(caught.value)
    assert line == "Cluster needs ipyparallel, which is not installed here: pip install 'workbench[cluster]'"
    assert isinstance(caught.value, ImportError)  # callers catching ImportError still do
    assert caught.value._render_traceback_() == [f"MissingExtra: {line}"]  # IPython shows the line, no traceback


def test_a_part_lacking_packages_of_several_extras_names_its_own(without):
    without("ipyparallel", "sklearn")
    with pytest.raises(extras.MissingExtra, match=r"needs ipyparallel, scikit-learn, which are not installed here: "):
        extras.require("cases")
    with pytest.raises(extras.MissingExtra) as caught:
        extras.require("cases")
    assert str(caught.value).endswith("pip install 'workbench[cases]'")  # one extra, not one per package


def test_tensorflow_is_the_users_own_build_never_an_extra(without):
    without("tensorflow")
    with pytest.raises(extras.MissingExtra) as caught:
        extras.require_module("tensorflow", "tensorflow", "", for_what="the recorder's Keras callback")
    line = str(caught.value)
    assert line.startswith("the recorder's Keras callback needs tensorflow, which is not installed here: install your")
    assert "workbench[tensorflow-cpu]" in line and "\n" not in line


def test_nothing_is_raised_when_the_part_is_there():
    extras.require("cluster")  # the project's venv has every extra
    extras.require("notebook")


@pytest.mark.parametrize(
    ("version", "environment", "expected"),
    [
        ("2.15.1", {}, None),
        ("2.17.1", {}, "pip install 'tf_keras~=2.17.0' and set TF_USE_LEGACY_KERAS=1"),
        ("2.17.1", {"TF_USE_LEGACY_KERAS": "1"}, None),
        ("2.16.0rc0", {}, "TensorFlow 2.16.0rc0 gives Keras 3 as tf.keras"),
        (None, {}, None),
    ],
)
def test_keras_3_is_named_with_its_fix(monkeypatch, version, environment, expected):
    monkeypatch.setattr(extras, "installed_version", lambda _module: version)
    line = extras.keras_3_line(environment)
    assert (line is None) if expected is None else (expected in line and "\n" not in line)


def test_the_installed_tensorflow_distribution_is_read_from_its_metadata():
    assert extras.installed_version("tensorflow") == "2.15.1"  # from tensorflow-cpu: pip's name is not the module's
    assert extras.installed_version("no_such_module_here") is None
