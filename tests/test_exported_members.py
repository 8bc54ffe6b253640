"""The public surface: every public name is exported, and import cowconv stays light."""

from __future__ import annotations

import inspect
import subprocess
import sys

import cowconv


class TestExports:
    def test_all_is_sorted_and_complete(self):
        """__all__ is sorted and names every public attribute defined by cowconv."""
        assert cowconv.__all__ == sorted(cowconv.__all__, key=str)
        public = {
            name
            for name, value in vars(cowconv).items()
            if not name.startswith("_") and getattr(value, "__module__", "").startswith("cowconv")
        }
        assert public <= set(cowconv.__all__)

    def test_every_export_resolves(self):
        """Each name in __all__ is importable from cowconv."""
        for name in cowconv.__all__:
            assert getattr(cowconv, name) is not None

    def test_public_classes_and_functions_have_runnable_examples(self):
        """Every public class and function of cowconv's public modules shows a doctest."""
        import cowconv.agent_server
        import cowconv.distributed
        import cowconv.event_store
        import cowconv.io
        import cowconv.testing
        import cowconv.tools.browser_use
        import cowconv.tools.file_editor
        import cowconv.tools.planning_file_editor
        import cowconv.tools.preset.default
        import cowconv.tools.preset.planning
        import cowconv.tools.search
        import cowconv.tools.task_tracker
        import cowconv.tools.terminal

        missing = []
        modules = (
            cowconv,
            cowconv.agent_server,
            cowconv.distributed,
            cowconv.event_store,
            cowconv.io,
            cowconv.testing,
            cowconv.tools.browser_use,
            cowconv.tools.file_editor,
            cowconv.tools.planning_file_editor,
            cowconv.tools.preset.default,
            cowconv.tools.preset.planning,
            cowconv.tools.search,
            cowconv.tools.task_tracker,
            cowconv.tools.terminal,
        )
        for module in modules:
            for name in module.__all__:
                value = getattr(module, name)
                if inspect.isclass(value) or inspect.isfunction(value):
                    if ">>>" not in (value.__doc__ or ""):
                        missing.append(f"{module.__name__}.{name}")
        assert missing == []

    def test_public_names_have_docstrings(self):
        """Every exported class and function documents itself."""
        for name in cowconv.__all__:
            value = getattr(cowconv, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert (value.__doc__ or "").strip(), name


class TestImportCost:
    def test_import_does_not_pull_heavy_dependencies(self):
        """import cowconv loads no LLM client, web framework or plotting library."""
        heavy = ["litellm", "fastapi", "uvicorn", "httpx", "matplotlib", "rich", "openai"]
        code = f"import sys, cowconv; print([m for m in {heavy!r} if m in sys.modules])"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "[]"

    def test_first_use_of_the_core_builds_no_model_and_loads_no_network_module(self):
        """Importing the core's names builds no cowconv model's validator (each is built when
        first used) and loads no network, log-file or thread-pool module: nothing of that is
        needed before a conversation runs."""
        code = (
            "import sys\n"
            "from cowconv import Conversation, Agent, LLM, Tool, MessageEvent\n"
            "from pydantic import BaseModel\n"
            "seen, todo = set(), [BaseModel]\n"
            "while todo:\n"
            "    for sub in todo.pop().__subclasses__():\n"
            "        if sub not in seen:\n"
            "            seen.add(sub); todo.append(sub)\n"
            "print(sorted(c.__qualname__ for c in seen if c.__module__.startswith('cowconv')\n"
            "             and c.__dict__.get('__pydantic_complete__')))\n"
            "unneeded = ('urllib.request', 'ssl', 'http.client', 'socket', 'logging.handlers',\n"
            "            'concurrent.futures')\n"
            "print(sorted(m for m in unneeded if m in sys.modules))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
        )
        assert out.stdout.split("\n")[:2] == ["[]", "[]"], out.stdout
