"""JupyterLab in headless Chromium for tests: start a server, open a notebook, run it, read the page.

Shared by the dashboard's browser test (``tests/browser``) and the notebook tests (``tests/notebooks``),
which run every notebook through :class:`LabNotebooks` when Debian's ``chromium`` is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from workbench.cluster import reap_processes

#: Debian's chromium wherever PATH finds it (``make browser`` checks the same way).
CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
#: JupyterLab user settings: no network checks.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"checkForUpdates": False, "fetchNews": "false"},
    "@jupyterlab/extensionmanager-extension/plugin.jupyterlab-settings": {"enabled": False},
    # every cell in the DOM (no virtual scrolling); each cell's run time kept in the saved notebook
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "recordTiming": True},
}
VIEWPORT = {"width": 1400, "height": 1000}


def browser_required() -> bool:
    """``make test`` and CI say the browser must be there; elsewhere a missing one skips."""
    return os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1" or os.environ.get("CI", "").lower() in ("1", "true")


def chromium_available() -> bool:
    """Chromium is installed; fails the test run when it is missing but required."""
    if CHROMIUM.exists():
        return True
    if browser_required():
        pytest.fail(
            "chromium is missing: install Debian's chromium (make browser); WORKBENCH_REQUIRE_BROWSER/CI says "
            "it must be there",
            pytrace=False,
        )
    return False


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.1) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def written_json(path: Path) -> Any:
    """The JSON another process wrote to ``path``; None while it is absent or half written."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def start_lab(root: Path, port: int, log: Path) -> subprocess.Popen:
    """JupyterLab on 127.0.0.1:port, no token, settings and workspaces in ``root``'s parent."""
    home = root.parent
    settings = home / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        target = settings / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "lab-workspaces"),
        "JUPYTER_RUNTIME_DIR": str(home / "jupyter-runtime"),
        # ipyparallel's lab extension loads every cluster file of the profile: a stale one in the user's
        # ~/.ipython (a run killed long ago) put its threads' Tracebacks in this server's log
        "IPYTHONDIR": str(home / "ipython"),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
    }
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None", "--LabApp.extension_manager=readonly", "--ServerApp.disable_check_xsrf=True",
    ]  # fmt: skip
    if os.geteuid() == 0:
        command.append("--allow-root")
    with log.open("w") as out:
        return subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)


def lab_is_up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def stop_processes(processes: list[psutil.Process]) -> None:
    """Terminate, then kill, the given processes (collected before any of them died)."""
    reap_processes({process.pid for process in processes}, grace_s=0)


def tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants (kernel, ipyparallel controller, mpiexec, engines)."""
    try:
        root = psutil.Process(pid)
        return [*root.children(recursive=True), root]
    except psutil.Error:
        return []


def saved_outputs_text(path: Path) -> tuple[list[str], str]:
    """Output types and all output text of a saved notebook."""
    notebook = json.loads(path.read_text())
    types, texts = [], []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            types.append(output["output_type"])
            texts.append(json.dumps(output))
    return types, "\n".join(texts)


def keep_failure(context: Any, prefix: str = "failure") -> None:
    """Screenshot and cell texts of every open page, to see why a wait failed."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for index, page in enumerate(context.pages):
        try:
            page.screenshot(path=str(ARTIFACTS / f"{prefix}-{index}.png"))
            texts = page.locator(".jp-Notebook .jp-Cell").all_inner_texts()
            (ARTIFACTS / f"{prefix}-{index}.txt").write_text("\n-----\n".join(texts))
        except Exception as error:
            print(f"could not keep the failing page {index}: {error!r}")


def accept_kernel_dialog(page: Any, wait_s: float = 2.0) -> None:
    """Accept JupyterLab's "Select Kernel" dialog (the default Python 3 kernel) if it shows up."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if accept.count() and accept.first.is_visible():
            accept.first.click()
            return
        time.sleep(0.1)


def run_all(page: Any) -> None:
    """The menu's *Run > Run All Cells*, as a user runs a notebook."""
    accept_kernel_dialog(page)  # JupyterLab sometimes asks which kernel; Run All then does nothing
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()


def save_and_read(page: Any, saved: Path, done: Callable[[dict[str, Any]], bool], timeout_s: float = 60) -> dict:
    """*File > Save*, then the saved notebook once ``done(notebook)`` holds (JupyterLab writes in place)."""
    page.locator(".lm-MenuBar-item", has_text="File").first.click()
    page.locator(".lm-Menu-item[data-command='docmanager:save']").click()

    def read() -> dict[str, Any] | None:
        try:
            notebook = json.loads(saved.read_text())
        except (json.JSONDecodeError, OSError):
            return None  # JupyterLab is still writing the file (it does not replace it atomically)
        return notebook if done(notebook) else None

    return wait_for(f"{saved.name} to be saved with its outputs", read, timeout_s, 0.2)


# -- every notebook, run as a user runs it -----------------------------------------------------------------

# Whether Run All has finished: no cell queued or running ([*]) and the kernel idle.
JS_RUN_STATE = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
    .map((p) => p.textContent.trim());
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return {
    running: prompts.filter((p) => p.includes('*')).length,
    numbered: prompts.filter((p) => /\\[\\d+\\]/.test(p)).length,
    cells: prompts.length,
    idle: !!indicator && indicator.getAttribute('data-status') === 'idle',
  };
}"""

# What a user sees, cell by cell: error text, widgets still loading, dashboards, tables wider than their cell.
JS_PAGE_CHECKS = """() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
  const problems = [];
  cells.forEach((cell, index) => {
    const area = cell.querySelector('.jp-OutputArea');
    if (!area) return;
    const text = area.innerText;
    for (const bad of ['Traceback', 'Loading widget', 'Error displaying widget', 'model not found']) {
      if (text.includes(bad)) problems.push(`cell ${index}: "${bad}" on the page`);
    }
    const shown = area.querySelectorAll('.workbench-dashboard').length;
    if (shown > 1) problems.push(`cell ${index}: ${shown} dashboards`);
    for (const output of area.querySelectorAll('.jp-OutputArea-output')) {
      const room = output.clientWidth;
      for (const table of output.querySelectorAll('table')) {
        const width = Math.ceil(table.getBoundingClientRect().width);
        if (width > room + 1) problems.push(`cell ${index}: a table ${width} px wide in a ${room} px output`);
      }
    }
  });
  return {problems};
}"""


class LabNotebooks:
    """One JupyterLab and one headless Chromium for a test session; ``run()`` runs a notebook in them.

    A notebook is parametrised as papermill does (an ``injected-parameters`` cell), opened in the lab
    with its kernel working in the test's own folder, run with *Run All*, checked on the page (no
    error text, no widget left loading, at most one dashboard per cell, no table wider than its
    output), screenshotted into ``artifacts/browser/notebook-<name>.png``, saved, and its kernel shut
    down. The saved notebook's outputs are what the tests then read.
    """

    def __init__(self, home: Path) -> None:
        from playwright.sync_api import sync_playwright

        self.home = home
        self.root = home / "lab"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = home / "jupyter.log"
        self._before = {process.pid for process in psutil.Process().children(recursive=True)}
        self.lab = start_lab(self.root, self.port, self.log)
        try:
            wait_for("JupyterLab to answer", lambda: self.lab.poll() is not None or lab_is_up(self.port), 90, 0.3)
            assert self.lab.poll() is None, f"JupyterLab exited: {self.log.read_text()[-3000:]}"
            self._playwright = sync_playwright().start()
            self.context = self._playwright.chromium.launch_persistent_context(
                str(home / "chromium-profile"),
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_ARGS,
                viewport=VIEWPORT,
            )
        except BaseException:
            self.close()
            raise

    def run(self, source: Path, folder: str, parameters: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """Run ``source`` with ``parameters`` in the browser; return the saved notebook (as JSON)."""
        import nbformat
        from papermill.iorw import load_notebook_node
        from papermill.parameterize import parameterize_notebook

        notebook = parameterize_notebook(load_notebook_node(str(source)), parameters)
        work = self.root / folder
        work.mkdir(parents=True, exist_ok=True)
        target = work / source.name
        nbformat.write(notebook, target)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page = self.context.new_page()
        try:
            # a workspace of its own: JupyterLab would otherwise reopen the notebooks of earlier tests beside it
            page.goto(f"http://127.0.0.1:{self.port}/lab/workspaces/{folder}/tree/{folder}/{source.name}")
            page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=90_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
            run_all(page)
            finished_since: list[float] = []

            def finished() -> dict[str, Any] | None:
                state = page.evaluate(JS_RUN_STATE)
                if state["running"] or not state["idle"] or not state["numbered"]:
                    finished_since.clear()
                    return None
                finished_since.append(time.monotonic())
                return state if finished_since[-1] - finished_since[0] >= 2.0 else None  # idle between cells

            state = wait_for(f"{source.name} to run to its end", finished, timeout_s, 0.5)
            wait_for("widgets to finish loading", lambda: "Loading widget" not in page.inner_text(".jp-Notebook"), 30)
            checks = page.evaluate(JS_PAGE_CHECKS)
            self._screenshots(page, source.stem)
            saved = save_and_read(page, target, lambda nb: _executed_cells(nb) >= state["numbered"])
            unrun = state["cells"] - state["numbered"]
            assert unrun == 0 or _error_outputs(saved), f"{unrun} cells of {source.name} did not run"
            assert not checks["problems"], f"{source.name} in the browser: " + "; ".join(checks["problems"])
            shutil.copy(target, ARTIFACTS / f"notebook-{source.stem}.ipynb")  # with each cell's run time
            return saved
        except BaseException:
            keep_failure(self.context, prefix=f"failure-{source.stem}")
            raise
        finally:
            page.close()
            self._shutdown_kernels()

    def _screenshots(self, page: Any, stem: str) -> None:
        """The first dashboard (or the notebook's top) and the notebook's end, as a user scrolls to them."""
        dashboard = page.locator(".workbench-dashboard")
        if dashboard.count():
            dashboard.first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"notebook-{stem}.png"))
        page.locator(".jp-Notebook .jp-Cell").last.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"notebook-{stem}-end.png"))

    def _shutdown_kernels(self) -> None:
        """Each notebook's kernel goes when its test ends: TensorFlow kernels hold ~0.5 GB each."""
        base = f"http://127.0.0.1:{self.port}/api/kernels"
        try:
            with urllib.request.urlopen(base, timeout=5) as response:
                kernels = json.loads(response.read())
            for kernel in kernels:
                request = urllib.request.Request(f"{base}/{kernel['id']}", method="DELETE")
                urllib.request.urlopen(request, timeout=30).close()
        except OSError as error:
            print(f"could not shut the notebook kernels down: {error!r}")

    def close(self) -> None:
        for step in (lambda: self.context.close(), lambda: self._playwright.stop()):
            try:
                step()
            except Exception:  # closing what may never have opened
                pass
        stop_processes(tree(self.lab.pid))
        stop_processes([p for p in psutil.Process().children(recursive=True) if p.pid not in self._before])
        if self.log.exists():
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.log, ARTIFACTS / "jupyter-notebooks.log")


def _executed_cells(notebook: dict[str, Any]) -> int:
    return sum(1 for cell in notebook["cells"] if cell["cell_type"] == "code" and cell.get("execution_count"))


def _error_outputs(notebook: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for c in notebook["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
