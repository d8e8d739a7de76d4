"""The snippet harness itself: what it collects, and that each check can fail."""

from __future__ import annotations

import sys
from pathlib import Path

from tests._harness.snippets import Outcome, Snippet, collect, run

PAGE = """# A page

```python
print("127.0.0.1:9876")
```

* a list item:

    ```console
    $ make no-such-target
    output line
    $ pip install "aiorocketmq[nope]" && aiorocket broker --no-such-option &
    ```

```text
anything
```
"""


def _snippet(code: str, lang: str = "python") -> Snippet:
    return Snippet(Path("page.md"), 1, lang, code)


def _run_program(code: str, namesrv: str, cwd: Path) -> Outcome:
    """What the harness makes of a Python snippet ``code`` run with this interpreter."""
    return run(_snippet(code), python=sys.executable, namesrv=namesrv, cwd=cwd, timeout=60)


def test_collects_fences_with_their_lines_and_languages(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    snippets = collect(page)
    assert [(s.line, s.lang, s.kind) for s in snippets] == [
        (3, "python", "program"),
        (9, "console", "commands"),
        (15, "text", "exempt"),
    ]
    assert snippets[1].code.startswith("$ make no-such-target\n")  # dedented


def test_a_program_gets_the_broker_address_and_must_exit_0(tmp_path: Path) -> None:
    ok = _run_program('print("127.0.0.1:9876")\n', "10.1.2.3:4", tmp_path)
    assert ok.ok
    assert ok.detail.strip() == "10.1.2.3:4"
    failing = _run_program("raise SystemExit(3)\n", "x", tmp_path)
    assert not failing.ok
    assert failing.detail.startswith("exit 3")


def test_each_command_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    outcome = run(collect(page)[1], python=sys.executable, namesrv="x", cwd=tmp_path, timeout=60)
    assert not outcome.ok
    assert "no Makefile target ['no-such-target']" in outcome.detail
    assert "pyproject.toml has no extra ['nope']" in outcome.detail
    assert "--no-such-option" in outcome.detail
    assert "output line" not in outcome.detail  # not a command: no prompt


def test_valid_commands_pass(tmp_path: Path) -> None:
    block = _snippet(
        'make demo test\npip install "aiorocketmq[spark,fastapi]"\n'
        "aiorocket admin lag billing -n 127.0.0.1:9876 --json\npython -m examples.orders\n",
        "bash",
    )
    outcome = run(block, python=sys.executable, namesrv="x", cwd=tmp_path, timeout=60)
    assert outcome.ok, outcome.detail
