"""The code interpreter (run_code and code contexts), blocking and asyncio,
against the python template's ipykernel."""

import asyncio
import base64

import pytest

from agentbox import AsyncSandbox, CodeContext, Execution, Result, Sandbox
from agentbox.errors import InvalidArgumentError, NotFoundError


@pytest.fixture(scope="module")
def py_sbx():
    with Sandbox.create(template="python", ttl_seconds=600, metadata={"suite": "sdk-python"}) as s:
        yield s


def test_run_code_state_results_and_callbacks(py_sbx):
    seen = []
    ex = py_sbx.run_code("x = 41\nprint('hi')\nx + 1", on_stdout=lambda s: seen.append(("out", s)),
                         on_result=lambda r: seen.append(("result", r.text)))
    assert isinstance(ex, Execution)
    assert ex.text == "42" and ex.logs.stdout == ["hi\n"] and ex.error is None
    assert ex.status == "ok" and not ex.restarted and ex.context == "python" and ex.execution_count >= 1
    assert seen == [("out", "hi\n"), ("result", "42")]
    r = ex.results[0]
    assert isinstance(r, Result) and r.is_main_result and r.formats() == ["text"]


def test_run_code_rich_and_errors(py_sbx):
    ex = py_sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    assert "<table" in ex.results[0].html and "html" in ex.results[0].formats()
    ex = py_sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
    png = [r.png for r in ex.results if r.png]
    assert png and base64.b64decode(png[0]).startswith(b"\x89PNG\r\n\x1a\n")
    errors = []
    ex = py_sbx.run_code("1/0", on_error=errors.append)
    assert ex.error.name == "ZeroDivisionError" and "1/0" in ex.error.traceback and ex.status == "error"
    assert errors == [ex.error]
    ex = py_sbx.run_code("import time\ntime.sleep(30)", timeout=0.5)
    assert ex.status == "timeout" and not ex.restarted
    assert py_sbx.run_code("x").text == "41"
    ex = py_sbx.run_code("import os\nos.environ['V']", env={"V": "a'b"})
    assert ex.text == "\"a'b\""


def test_code_contexts(py_sbx):
    c = py_sbx.create_code_context(cwd="/tmp", env={"CV": "1"})
    assert isinstance(c, CodeContext) and c.language == "python" and c.state == "idle"
    assert py_sbx.run_code("import os\n(os.getcwd(), os.environ['CV'])", context=c).text == "('/tmp', '1')"
    assert c.id in [x.id for x in py_sbx.list_code_contexts()]
    assert py_sbx.interrupt_code_context(c).id == c.id
    assert py_sbx.restart_code_context(c.id).restarts == 1
    py_sbx.remove_code_context(c)
    assert c.id not in [x.id for x in py_sbx.list_code_contexts()]
    with pytest.raises(NotFoundError):
        py_sbx.run_code("1", context=c.id)
    with pytest.raises(InvalidArgumentError):
        py_sbx.run_code("1", context="python", language="python")
    with pytest.raises(InvalidArgumentError):
        py_sbx.run_code("1", language="cobol")


def test_async_run_code(py_sbx):
    async def go():
        sbx = await AsyncSandbox.connect(py_sbx.id)
        try:
            out = []

            async def on_stdout(s):
                out.append(s)

            ex = await sbx.run_code("print('async'); 6 * 7", on_stdout=on_stdout)
            assert ex.text == "42" and out == ["async\n"]
            c = await sbx.create_code_context()
            assert (await sbx.run_code("'own'", context=c)).text == "'own'"
            assert c.id in [x.id for x in await sbx.list_code_contexts()]
            await sbx.restart_code_context(c)
            await sbx.interrupt_code_context(c)
            await sbx.remove_code_context(c)
        finally:
            await sbx.close()

    asyncio.run(go())
