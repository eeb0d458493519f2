// E2B's quickstarts (quickstart/*.mjs), each run as its own Node process
// with only the E2B variables set, as a user runs them. Run by
// integration/e2b_test.go (TestE2BQuickstarts).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { Sandbox } from 'e2b'

const run = promisify(execFile)

async function quickstart(file) {
  const { stdout } = await run(process.execPath, [file], { timeout: 300_000 })
  const lines = stdout.trim().split('\n')
  const id = lines.at(-1)
  // The quickstarts leave their sandbox to its 5-minute timeout; the test
  // does not.
  await Sandbox.kill(id)
  return lines.slice(0, -1).join('\n')
}

test('the e2b quickstart: create, run a command, write and read a file', async () => {
  const out = await quickstart('quickstart/sandbox.mjs')
  assert.equal(out, 'hello from Linux\nwritten by the quickstart')
})

test('the code interpreter quickstart: runCode and files.list', async () => {
  const out = await quickstart('quickstart/interpreter.mjs')
  assert.match(out, /stdout: \[ 'hello world\\n' \]/)
  assert.match(out, /\btmp\b/)
  assert.match(out, /\busr\b/)
})
