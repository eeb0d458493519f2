// The unmodified @e2b/code-interpreter SDK against agentbox's E2B API
// (docs/e2b.md): its default template, code-interpreter-v1, runs on
// agentbox's python template. Run by integration/e2b_test.go
// (TestE2BCodeInterpreter; TestE2BCodeInterpreterGvisor with
// E2B_TEST_TEMPLATE=code-interpreter-v1@gvisor, the same on gVisor).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const template = process.env.E2B_TEST_TEMPLATE
let sbx

before(async () => {
  const opts = { timeoutMs: 600_000 }
  sbx = template ? await Sandbox.create(template, opts) : await Sandbox.create(opts)
})

after(async () => {
  if (sbx) await sbx.kill()
})

test('runCode: the main result, logs and state across runs', async () => {
  const ex = await sbx.runCode('x = 41\nprint("hello")\nx + 1')
  assert.equal(ex.text, '42')
  assert.deepEqual(ex.logs.stdout, ['hello\n'])
  assert.equal(ex.error, undefined)
  const again = await sbx.runCode('x * 2')
  assert.equal(again.text, '82')
})

test('runCode: callbacks and envs', async () => {
  const out = []
  const ex = await sbx.runCode('import os, sys\nprint(os.environ["GREETING"])\nprint("warn", file=sys.stderr)', {
    envs: { GREETING: 'hi there' },
    onStdout: (m) => out.push(m.line),
  })
  assert.deepEqual(out, ['hi there\n'])
  assert.deepEqual(ex.logs.stderr, ['warn\n'])
})

test('runCode: an exception is execution.error', async () => {
  const ex = await sbx.runCode('1 / 0')
  assert.equal(ex.error.name, 'ZeroDivisionError')
  assert.match(ex.error.value, /division by zero/)
  assert.match(ex.error.traceback, /ZeroDivisionError/)
})

test('runCode: a matplotlib chart is a PNG result', async () => {
  const ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
  assert.equal(ex.error, undefined, JSON.stringify(ex.error))
  const png = ex.results.find((r) => r.png)
  assert.ok(png, `results ${JSON.stringify(ex.results.map((r) => Object.keys(r)))}`)
  assert.equal(Buffer.from(png.png, 'base64').subarray(1, 4).toString(), 'PNG')
})

test('contexts: create, run in, list, restart, remove', async () => {
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  await sbx.runCode('y = "in context"', { context: ctx })
  assert.equal((await sbx.runCode('y', { context: ctx })).text, "'in context'")
  assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, "'/tmp'")
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id), JSON.stringify(listed))
  await sbx.restartCodeContext(ctx)
  const lost = await sbx.runCode('y', { context: ctx })
  assert.equal(lost.error.name, 'NameError')
  await sbx.removeCodeContext(ctx.id)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
})
