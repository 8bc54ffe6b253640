"""Run OpenHands' own examples offline, on OpenHands' SDK or on cowconv, and compare.

The examples of ``OpenHands/software-agent-sdk`` are what an OpenHands user's
ordinary code looks like. This script takes them from an OpenHands snapshot
(the same sources as ``port.py``: ``--git-dir``, ``--source`` or the
environment), renames their imports with ``port.py``'s rules for ``--target
cowconv`` (files unchanged for ``--target openhands``), and runs each in a
fresh temporary directory under ``python -m cowconv.testing --``: one offline,
OpenAI-compatible stub LLM on 127.0.0.1, ``LLM_MODEL``/``LLM_BASE_URL``/
``LLM_API_KEY`` pointing at it. An example *completes* when it exits 0 within
the timeout (90 s by default); otherwise the last line it printed on stderr
says why.

The selection (:func:`selected`) is the one the project counts: every
``examples/01_standalone_sdk/*.py``, the ``main.py`` of its subfolders, and
``examples/02_remote_agent_server/01_*`` and ``11_*`` (58 examples at the
pinned commit).

>>> selected(["examples/01_standalone_sdk/01_hello_world.py",
...           "examples/01_standalone_sdk/33_hooks/main.py",
...           "examples/01_standalone_sdk/33_hooks/hook_scripts/x.sh",
...           "examples/02_remote_agent_server/01_convo_with_local_agent_server.py",
...           "examples/02_remote_agent_server/02_convo_with_docker_sandboxed_server.py",
...           "examples/03_github_workflows/01_basic_action/agent_script.py"])
['examples/01_standalone_sdk/01_hello_world.py', 'examples/01_standalone_sdk/33_hooks/main.py', \
'examples/02_remote_agent_server/01_convo_with_local_agent_server.py']

Usage (standard library only; the stub comes from cowconv, so ``--stub-python``
must have cowconv installed)::

    python tests/openhands/examples.py run --target openhands --json oh.json
    python tests/openhands/examples.py run --target cowconv --json cc.json
    python tests/openhands/examples.py report oh.json cc.json

``run --target openhands`` uses the ``venv.py`` environment (openhands-sdk
1.58.2) unless ``--python`` names another interpreter.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent

__all__ = ["selected", "summary", "main"]


def _load(name: str) -> ModuleType:
    """A sibling module loaded by path (``port``/``venv``; venv's name shadows the stdlib's)."""
    spec = importlib.util.spec_from_file_location(f"cowconv_openhands_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_SELECTED = re.compile(
    r"^examples/01_standalone_sdk/[^/]+\.py$"
    r"|^examples/01_standalone_sdk/[^/]+/main\.py$"
    r"|^examples/02_remote_agent_server/(01|11)_[^/]+\.py$"
)


def selected(listing: Iterable[str]) -> list[str]:
    """The examples counted, in the listing's order (see the module's docstring)."""
    return [path for path in listing if _SELECTED.match(path)]


def _bundle(example: str, listing: Sequence[str]) -> tuple[str, list[str]]:
    """The folder an example runs from and the files copied with it.

    A subfolder's ``main.py`` takes its whole subfolder (hook scripts, profiles,
    skills); a top-level script of a folder takes the script and every file of
    that folder that is not another example's (``scripts/utils.py``, ``hook_scripts/``).

    >>> _bundle("examples/01_standalone_sdk/33_hooks/main.py",
    ...         ["examples/01_standalone_sdk/33_hooks/main.py",
    ...          "examples/01_standalone_sdk/33_hooks/hook_scripts/a.sh",
    ...          "examples/01_standalone_sdk/01_hello_world.py"])
    ('examples/01_standalone_sdk/33_hooks', ['main.py', 'hook_scripts/a.sh'])
    >>> _bundle("examples/02_remote_agent_server/11_fork.py",
    ...         ["examples/02_remote_agent_server/11_fork.py",
    ...          "examples/02_remote_agent_server/01_other.py",
    ...          "examples/02_remote_agent_server/scripts/utils.py",
    ...          "examples/02_remote_agent_server/06_custom_tool/main.py"])
    ('examples/02_remote_agent_server', ['11_fork.py', 'scripts/utils.py'])
    """
    folder, _, name = example.rpartition("/")
    if name == "main.py":
        files = [p[len(folder) + 1 :] for p in listing if p.startswith(folder + "/")]
        return folder, files
    files = [name]
    for path in listing:
        if not path.startswith(folder + "/"):
            continue
        rest = path[len(folder) + 1 :]
        top = rest.split("/")[0]
        # Another example (a script, or a numbered subfolder) is not part of this one.
        if re.match(r"^\d+_", top):
            continue
        files.append(rest)
    return folder, files


def _prepare(source: object, port: ModuleType, example: str, target: str, directory: Path) -> Path:
    """Write the example and its files under ``directory``; return the script to run."""
    listing = source.listing()  # type: ignore[attr-defined]
    folder, files = _bundle(example, listing)
    modules = source.modules() if target == "cowconv" else set()  # type: ignore[attr-defined]
    for relative in files:
        text = source.read(f"{folder}/{relative}")  # type: ignore[attr-defined]
        if text is None:
            continue
        if target == "cowconv" and relative.endswith(".py"):
            text, _ = port.rewrite_source(text, modules)
            # A server started as a module: OpenHands' agent server is cowconv's.
            text = text.replace('"openhands.agent_server"', '"cowconv.agent_server"')
        destination = directory / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text, encoding="utf-8")
        if relative.endswith(".sh"):
            destination.chmod(0o755)
    if target == "cowconv":
        chains = {prefix: list(chain) for prefix, chain in port.MODULE_MAP}
        (directory / "_ohport.py").write_text(port._OHPORT.format(chains=chains), encoding="utf-8")
    return directory / example.rpartition("/")[2]


def _reason(stderr: str, stdout: str) -> str:
    """The line that says why a run failed: the exception's, else the last one printed.

    >>> _reason("Traceback ...\\n  File x\\nImportError: no FileEditorTool\\n", "")
    'ImportError: no FileEditorTool'
    >>> _reason("", "last words\\n")
    'last words'
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", line):
            return line[:300]
    tail = lines or [line.strip() for line in stdout.splitlines() if line.strip()]
    return tail[-1][:300] if tail else ""


def _run_one(
    source: object,
    port: ModuleType,
    example: str,
    target: str,
    python: str,
    stub_python: str,
    timeout: float,
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="ohexample-") as temporary:
        directory = Path(temporary)
        script = _prepare(source, port, example, target, directory)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" or target == "cowconv"}
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        # `python` in an example's subprocess (its agent server) is the target's interpreter.
        env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
        env["HOME"] = str(directory / "home")  # nothing read from or left in the real home
        (directory / "home").mkdir()
        command = [stub_python, "-m", "cowconv.testing", "--", python, script.name]
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            cwd=script.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            status = "completed" if process.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            status = "timeout"
        seconds = round(time.monotonic() - started, 1)
    reason = "" if status == "completed" else _reason(stderr, stdout)
    if status == "timeout":
        reason = f"no exit within {timeout:g} s; last: {reason}"
    return {
        "status": status,
        "returncode": process.returncode,
        "seconds": seconds,
        "reason": reason,
    }


def summary(results: dict[str, dict[str, object]]) -> str:
    """One line: how many examples completed of how many.

    >>> summary({"a.py": {"status": "completed"}, "b.py": {"status": "failed"}})
    '1 of 2 examples completed'
    """
    done = sum(1 for r in results.values() if r["status"] == "completed")
    return f"{done} of {len(results)} examples completed"


def report(openhands: dict[str, dict[str, object]], cowconv: dict[str, dict[str, object]]) -> str:
    """Markdown: of the examples that complete on OpenHands' SDK, which complete on cowconv.

    >>> print(report({"a.py": {"status": "completed"}, "b.py": {"status": "completed"},
    ...               "c.py": {"status": "failed", "reason": "needs a key"}},
    ...              {"a.py": {"status": "completed"},
    ...               "b.py": {"status": "failed", "reason": "ImportError: x"},
    ...               "c.py": {"status": "failed", "reason": "y"}}))
    1 of the 2 examples that complete on OpenHands' SDK complete on cowconv.
    <BLANKLINE>
    | example | on cowconv | why not |
    | --- | --- | --- |
    | `b.py` | failed | ImportError: x |
    """
    baseline = [name for name, r in openhands.items() if r["status"] == "completed"]
    both = [n for n in baseline if cowconv.get(n, {}).get("status") == "completed"]
    lines = [
        f"{len(both)} of the {len(baseline)} examples that complete on OpenHands' SDK "
        "complete on cowconv.",
        "",
        "| example | on cowconv | why not |",
        "| --- | --- | --- |",
    ]
    for name in baseline:
        if name in both:
            continue
        result = cowconv.get(name, {"status": "not run", "reason": ""})
        reason = str(result.get("reason", "")).replace("|", "\\|")
        lines.append(f"| `{name}` | {result['status']} | {reason} |")
    return "\n".join(lines)


def main(argv: Iterable[str] | None = None) -> int:
    port = _load("port")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the examples on one target")
    p.add_argument("--source", help="an OpenHands checkout (a directory)")
    p.add_argument("--git-dir", help="an OpenHands git directory (no work tree)")
    p.add_argument("--commit", default=None)
    p.add_argument("--target", choices=("cowconv", "openhands"), default="cowconv")
    p.add_argument("--python", help="the interpreter that runs the examples")
    p.add_argument("--stub-python", default=sys.executable, help="an interpreter with cowconv")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per example (90)")
    p.add_argument("--jobs", type=int, default=2, help="examples run at once (2)")
    p.add_argument("--only", default="", help="a regular expression the example paths match")
    p.add_argument("--json", help="write the results here")
    p = sub.add_parser("report", help="compare two runs' JSON")
    p.add_argument("openhands_json")
    p.add_argument("cowconv_json")
    args = parser.parse_args(list(argv) if argv is not None else None)

    if args.command == "report":
        openhands = json.loads(Path(args.openhands_json).read_text(encoding="utf-8"))
        cowconv = json.loads(Path(args.cowconv_json).read_text(encoding="utf-8"))
        print(report(openhands, cowconv))
        return 0
    source = port.find_source(args.source, args.git_dir, args.commit)
    if source is None:
        raise SystemExit("no OpenHands checkout: pass --source DIR or --git-dir GITDIR")
    python = args.python
    if python is None:
        python = (
            sys.executable if args.target == "cowconv" else str(_load("venv").openhands_python())
        )
    examples = [e for e in selected(source.listing()) if re.search(args.only, e)]
    results: dict[str, dict[str, object]] = {}

    def one(example: str) -> None:
        outcome = _run_one(
            source, port, example, args.target, python, args.stub_python, args.timeout
        )
        results[example] = outcome
        print(
            f"{outcome['status']:9} {outcome['seconds']:6}s {example} {outcome['reason']}",
            flush=True,
        )

    if shutil.which("git") is None and source.directory is None:
        raise SystemExit("git is needed to read the snapshot")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, examples))
    ordered = {example: results[example] for example in examples}
    print(summary(ordered))
    if args.json:
        Path(args.json).write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
