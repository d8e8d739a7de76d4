"""The AsyncAPI 3.0 document of an App: its content, ``aiorocket asyncapi`` (JSON and YAML),
and the official parser (npm ``@asyncapi/parser``, run in a Node subprocess) finding neither
an error nor a warning in the document of ``examples/orders.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiorocket.app.asyncapi import to_yaml

#: PyYAML comes with MkDocs (the docs extra); untyped, hence Any
yaml: Any = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = Path(__file__).with_name("asyncapi_validate.js")
#: npm packages are installed here, outside the repository, once per machine
NPM_CACHE = Path(os.environ.get("AIOROCKET_NPM_CACHE", Path.home() / ".cache/aiorocket/npm"))
PARSER = "@asyncapi/parser@3.6.6"


def orders_document(*extra: str, target: str = "examples.orders:app") -> str:
    out = subprocess.run(
        [sys.executable, "-m", "aiorocket", "asyncapi", target, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


@pytest.fixture(scope="module")
def parser_modules() -> Path:
    """``node_modules`` holding the official parser (installed with npm on first use)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run @asyncapi/parser (apt-get install nodejs npm)")
    modules = NPM_CACHE / "node_modules"
    if not (modules / "@asyncapi/parser/package.json").exists():
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        if not (NPM_CACHE / "package.json").exists():
            (NPM_CACHE / "package.json").write_text('{"private": true}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", PARSER],
            cwd=NPM_CACHE,
            check=True,
            capture_output=True,
            timeout=600,
        )
    return modules


def diagnostics(document: str, modules: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["node", str(VALIDATOR)],
        input=document,
        env={**os.environ, "NODE_PATH": str(modules)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: list[dict[str, Any]] = json.loads(out.stdout)
    return result


def test_the_orders_document_has_no_errors_or_warnings(parser_modules: Path) -> None:
    found = diagnostics(orders_document(), parser_modules)
    # 0 error, 1 warning; 2 information ("3.1.0 is out") and 3 hints are no faults
    assert [d for d in found if d["severity"] <= 1] == []
    assert all(d["severity"] in (2, 3) for d in found)


def test_the_parser_does_report_a_broken_document(parser_modules: Path) -> None:
    # (the parser's 3.x ruleset has error and information rules only; its warnings, such as
    # a missing info.contact, are for 2.x documents)
    doc = json.loads(orders_document())
    doc["operations"]["bill"]["channel"] = {"$ref": "#/channels/order-status"}
    found = diagnostics(json.dumps(doc), parser_modules)
    assert [(d["severity"], d["path"]) for d in found if d["severity"] == 0] == [
        (0, "operations/bill/messages/0")
    ], found


def test_the_orders_document_describes_topics_operations_and_replies() -> None:
    doc = json.loads(orders_document())
    assert doc["asyncapi"] == "3.0.0"
    assert doc["servers"]["namesrv0"] == {
        "host": "127.0.0.1:9876",
        "protocol": "rocketmq",
        "description": "A RocketMQ name server; clients look up the brokers there.",
    }
    assert {k: c["address"] for k, c in doc["channels"].items()} == {
        "orders": "orders",
        "order-status": "order-status",
        "replies": "{cluster}_REPLY_TOPIC",
    }
    ops = doc["operations"]
    assert {k: (o["action"], o.get("x-rocketmq-group")) for k, o in ops.items()} == {
        "bill": ("receive", "billing"),
        "fulfil": ("receive", "fulfilment"),
        "status": ("receive", "status"),
        "publish_orders": ("send", None),
        "publish_order-status": ("send", None),
    }
    assert ops["bill"]["x-rocketmq-tags"] == "created"
    assert ops["fulfil"]["x-rocketmq-orderly"] is True
    for linked in ("status", "publish_order-status"):
        assert ops[linked]["reply"]["messages"] == [
            {"$ref": "#/channels/replies/messages/OrderStatus"}
        ]
    schemas = doc["components"]["schemas"]
    assert schemas["OrderEvent"]["required"] == ["order_id", "seq", "event"]
    assert set(schemas["OrderStatus"]["properties"]) == {"order_id", "billed", "events_fulfilled"}
    assert doc["components"]["messages"]["StatusQuery"]["correlationId"]["location"] == (
        "$message.header#/CORRELATION_ID"
    )


def test_the_yaml_form_is_the_same_document() -> None:
    assert yaml.safe_load(orders_document("--yaml")) == json.loads(orders_document())
    tricky = {"a": [{"b": "x: y #z"}, [], {}], "c": ["-", 1.5, None, True, "\u00e9\n"]}
    assert yaml.safe_load(to_yaml(tricky)) == tricky


def test_the_docs_show_the_document_the_command_prints() -> None:
    page = (ROOT / "docs/how-to/asyncapi.md").read_text()
    shown = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert shown == orders_document(
        "--yaml", "--title", "stock", target="examples.stock_worker:app"
    )


def test_a_target_that_is_no_app_exits_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "aiorocket", "asyncapi", "json:decoder"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "not an aiorocket.App" in out.stderr, out.stderr
