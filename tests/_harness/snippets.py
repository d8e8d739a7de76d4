"""The fenced code blocks of README.md and docs/**/*.md, collected and checked.

What happens to each fence (the rules docs/contributing.md states for authors):

* ``python``: a complete program. It is written to a file and run with the given interpreter
  in a subprocess, with every ``"127.0.0.1:9876"`` replaced by the test broker's address; it
  passes when it exits 0 within the timeout. A block importing an optional extra (FastAPI,
  Spark, OpenTelemetry, Prometheus, httpx or pytest) that interpreter lacks is skipped, naming
  what is missing, or, with ``strict`` (the interpreter of a virtualenv holding what the page
  tells its reader to install), fails; a Spark block without a Java runtime is skipped.
* ``console``, ``bash``, ``sh``, ``shell``: each command line is checked, not executed (most
  start servers that run until stopped): ``aiorocket ...`` must parse with the command line's
  own parser, ``make T`` must name a target of the Makefile, ``pip install`` of
  ``aiorocketmq[x,...]`` must name extras of pyproject.toml, ``python -m examples.x`` and
  ``python examples/x.py`` must name an existing example. Other commands are not checked.
* ``text``, an unlabelled fence and any other language (``java``, ``cpp``, ``yaml``, ...):
  exempt, shown as written.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COMMAND_LANGS",
    "NAMESRV",
    "ROOT",
    "Outcome",
    "Snippet",
    "collect",
    "documented_files",
    "run",
]

#: the repository's root
ROOT = Path(__file__).resolve().parents[2]
#: the name server address snippets use; ``run`` substitutes the test broker's
NAMESRV = "127.0.0.1:9876"
#: fences whose command lines are checked
COMMAND_LANGS = frozenset({"console", "bash", "sh", "shell"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")

#: modules an optional extra brings -> what to install. Imports of ``aiorocket`` integrations
#: count as their third-party modules (they raise ImportError naming the extra without them).
_OPTIONAL: dict[str, tuple[tuple[str, ...], str]] = {
    "fastapi": (("fastapi",), '"aiorocketmq[fastapi]"'),
    "uvicorn": (("uvicorn",), '"aiorocketmq[fastapi]"'),
    "httpx": (("httpx",), "httpx"),
    "pyspark": (("pyspark", "pyarrow"), '"aiorocketmq[spark]"'),
    "pyarrow": (("pyarrow",), '"aiorocketmq[spark]"'),
    "opentelemetry": (("opentelemetry.sdk",), '"aiorocketmq[opentelemetry]"'),
    "prometheus_client": (("prometheus_client",), '"aiorocketmq[prometheus]"'),
    "pytest": (("pytest", "pytest_asyncio"), "pytest pytest-asyncio"),
    "aiorocket.integrations.fastapi": (("fastapi",), '"aiorocketmq[fastapi]"'),
    "aiorocket.integrations.prometheus": (("prometheus_client",), '"aiorocketmq[prometheus]"'),
    "aiorocket.integrations.opentelemetry": (
        ("opentelemetry.sdk",),
        '"aiorocketmq[opentelemetry]"',
    ),
    "aiorocket.integrations.spark": (("pyspark", "pyarrow"), '"aiorocketmq[spark]"'),
    "aiorocket.spark": (("pyspark", "pyarrow"), '"aiorocketmq[spark]"'),
}
_SPARK_MODULES = ("pyspark", "aiorocket.spark", "aiorocket.integrations.spark")


@dataclass(frozen=True)
class Snippet:
    """One fenced code block: where it is, its language and its text (dedented)."""

    path: Path
    #: 1-based line of the opening fence
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        """``file:line``, relative to the repository when inside it (the test id)."""
        try:
            name = self.path.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            name = self.path.as_posix()
        return f"{name}:{self.line}"

    @property
    def kind(self) -> str:
        """``program`` (python), ``commands`` (console/bash/sh/shell) or ``exempt``."""
        if self.lang == "python":
            return "program"
        if self.lang in COMMAND_LANGS:
            return "commands"
        return "exempt"


@dataclass(frozen=True)
class Outcome:
    """What checking a snippet gave: ``skipped`` says why it was not run; otherwise ``ok``."""

    ok: bool
    skipped: str | None = None
    detail: str = ""
    seconds: float = 0.0


def documented_files(root: Path = ROOT) -> list[Path]:
    """README.md and every ``docs/**/*.md`` under ``root``, sorted."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def collect(path: Path) -> list[Snippet]:
    """Every fenced code block of the Markdown file ``path``, in order."""
    snippets: list[Snippet] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        # The info string's first word is the language (`python title="x.py"` is python).
        lang = (m["info"].split() or [""])[0].lower().lstrip(".{")
        start, body = i + 1, []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            # Content of a fence nested in a list item is indented like its opening line.
            line = lines[i]
            body.append(line[indent:] if not line[:indent].strip() else line.lstrip())
            i += 1
        snippets.append(Snippet(path, start, lang, "\n".join(body) + "\n"))
        i += 1
    return snippets


def run(
    snippet: Snippet,
    *,
    python: str,
    namesrv: str,
    cwd: Path,
    timeout: float,
    strict: bool = False,
) -> Outcome:
    """Check ``snippet`` as its fence's rule says (see the module docstring).

    ``python`` is the interpreter that runs programs and parses ``aiorocket`` command lines
    (a freshly installed wheel's, a page's virtualenv, or ``sys.executable``); ``namesrv``
    replaces ``"127.0.0.1:9876"``; ``cwd`` is the working directory of programs (they may
    write files there); ``timeout`` bounds one program, in seconds. With ``strict`` (an
    interpreter holding what the page tells its reader to install) a program importing an
    extra that interpreter lacks fails instead of being skipped; one needing Java without it
    is still skipped.
    """
    start = time.monotonic()
    if snippet.kind == "exempt":
        return Outcome(ok=True, skipped=f"```{snippet.lang or '(no language)'} is not checked")
    if snippet.kind == "commands":
        problems = _check_commands(snippet, python)
        return Outcome(not problems, None, "\n".join(problems), time.monotonic() - start)
    missing = _missing_extras(snippet.code, python)
    if missing is not None:
        if strict:
            return Outcome(False, None, f"the page does not say to install it: {missing}")
        return Outcome(ok=True, skipped=missing)
    no_java = _missing_java(snippet.code)
    if no_java is not None:
        return Outcome(ok=True, skipped=no_java)
    program = cwd / f"snippet_{snippet.line}.py"
    program.write_text(snippet.code.replace(NAMESRV, namesrv), encoding="utf-8")
    # Nothing is added to the environment (PYSPARK_PYTHON included): a snippet must set up
    # what it needs itself, as it would for a reader. PYTHONPATH goes, so the snippet sees the
    # installed package as a user does.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        done = subprocess.run(
            [python, str(program)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr)
        return Outcome(False, None, f"still running after {timeout} s\n{output}", timeout)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        return Outcome(
            False, None, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}", seconds
        )
    return Outcome(True, None, done.stdout, seconds)


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _imported_modules(code: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def _missing_extras(code: str, python: str) -> str | None:
    """Why the program cannot run with ``python`` (an extra it imports is not installed), or
    ``None``."""
    needed: dict[str, str] = {}
    imported = _imported_modules(code)
    for module in imported:
        for prefix, (requires, install) in _OPTIONAL.items():
            if module == prefix or module.startswith(prefix + "."):
                needed.update(dict.fromkeys(requires, install))
    if needed:
        probe = (
            "import importlib.util, sys\n"
            "def has(m):\n"
            "    try:\n"
            "        return importlib.util.find_spec(m) is not None\n"
            "    except ImportError:\n"
            "        return False\n"
            "print(' '.join(m for m in sys.argv[1:] if not has(m)))\n"
        )
        found = subprocess.run(
            [python, "-c", probe, *sorted(needed)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        absent = found.stdout.split()
        if absent:
            installs = sorted({needed[m] for m in absent})
            return f"needs {', '.join(absent)}: pip install {' '.join(installs)}"
    return None


def _missing_java(code: str) -> str | None:
    """Why a Spark program cannot run here (no Java runtime), or ``None``."""
    imported = _imported_modules(code)
    if any(m == s or m.startswith(s + ".") for m in imported for s in _SPARK_MODULES):
        java_home = os.environ.get("JAVA_HOME")
        if shutil.which("java") is None and not (
            java_home and Path(java_home, "bin", "java").exists()
        ):
            return "Spark needs a Java runtime (java on PATH or JAVA_HOME)"
    return None


def _command_lines(code: str) -> list[str]:
    """The commands of a console block: prompts removed, continuations joined, comments and
    output lines (in a block using ``$`` prompts, the lines without one) dropped."""
    raw = code.splitlines()
    prompted = any(line.startswith("$ ") for line in raw)
    commands: list[str] = []
    pending = ""
    for line in raw:
        if prompted and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.strip() and not line.lstrip().startswith("#"):
            commands.append(line.strip())
    return commands


def _check_commands(snippet: Snippet, python: str) -> list[str]:
    problems: list[str] = []
    cli: list[tuple[str, list[str]]] = []
    for command in _command_lines(snippet.code):
        try:
            lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
        except ValueError as exc:
            problems.append(f"{command!r}: {exc}")
            continue
        # Each part of `a && b`, `a; b`, `a | b` and `a &` is a command of its own.
        parts: list[list[str]] = [[]]
        for token in tokens:
            if token and set(token) <= set("&|;"):
                parts.append([])
            else:
                parts[-1].append(token)
        for words in parts:
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                words = words[1:]  # VAR=value prefixes
            if not words:
                continue
            if Path(words[0]).name == "aiorocket":
                cli.append((command, words[1:]))
                continue
            problem = _check_command(words)
            if problem:
                problems.append(f"{command!r}: {problem}")
    if cli:
        for (command, _), problem in zip(cli, _check_cli([a for _, a in cli], python), strict=True):
            if problem:
                problems.append(f"{command!r}: the aiorocket command line refuses it: {problem}")
    return problems


def _check_command(words: list[str]) -> str | None:
    head = Path(words[0]).name
    if head == "make":
        targets = _make_targets()
        unknown = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        unknown = [t for t in unknown if t not in targets]
        return f"no Makefile target {unknown}" if unknown else None
    if head in {"pip", "pip3"} or words[1:3] == ["-m", "pip"]:
        extras = _extras()
        for word in words:
            m = re.fullmatch(r"aiorocketmq\[([^\]]*)\]", word)
            if m:
                bad = [e.strip() for e in m[1].split(",") if e.strip() not in extras]
                if bad:
                    return f"pyproject.toml has no extra {bad}"
        return None
    if head.startswith("python"):
        if words[1:2] == ["-m"] and len(words) > 2 and words[2].startswith("examples."):
            target = ROOT / (words[2].replace(".", "/") + ".py")
            return None if target.exists() else f"{target.relative_to(ROOT)} does not exist"
        if len(words) > 1 and words[1].startswith(("examples/", "benchmarks/")):
            target = ROOT / words[1]
            return None if target.exists() else f"{words[1]} does not exist"
    return None


def _check_cli(argvs: list[list[str]], python: str) -> list[str | None]:
    """Parse each ``aiorocket argv`` with the command line's own parser, without running it
    (one interpreter for all of them); the parser's complaint for each, or ``None``."""
    probe = (
        "import contextlib, io, json, sys\n"
        "from aiorocket.cli import _parser\n"
        "out = []\n"
        "for argv in json.loads(sys.stdin.read()):\n"
        "    err = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
        "            _parser().parse_args(argv)\n"
        "    except SystemExit as exc:\n"
        "        if exc.code:\n"
        "            out.append(err.getvalue().strip() or f'exit {exc.code}')\n"
        "            continue\n"
        "    out.append(None)\n"
        "print(json.dumps(out))\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [python, "-c", probe],
            input=json.dumps(argvs),
            capture_output=True,
            text=True,
            cwd=tmp,
            timeout=60,
            check=True,
        )
    result: list[str | None] = json.loads(done.stdout)
    return result


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m[1] for m in re.finditer(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile, re.MULTILINE)}


def _extras() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    return set(project.get("optional-dependencies", {}))


if __name__ == "__main__":  # pragma: no cover - a quick listing for authors
    for file in documented_files():
        for s in collect(file):
            print(s.id, s.lang or "-", s.kind)
    sys.exit(0)
