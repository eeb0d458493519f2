// The unmodified e2b SDKs configured with E2B_DOMAIN alone (docs/e2b.md):
// no E2B_API_URL, no E2B_SANDBOX_URL, so the SDK reaches the control plane
// at https://api.<domain> and each sandbox at https://<port>-<id>.<domain>,
// as it reaches E2B's cloud. Run by integration/e2b_test.go
// (TestE2BDomain), which puts the daemon behind TLS with a test CA
// (NODE_EXTRA_CA_CERTS) and resolves *.<domain> to 127.0.0.1
// (loopback.mjs).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

const domain = process.env.E2B_DOMAIN
let sbx

before(async () => {
  assert.equal(process.env.E2B_API_URL, undefined)
  assert.equal(process.env.E2B_SANDBOX_URL, undefined)
  sbx = await Sandbox.create('base', { timeoutMs: 600_000 })
})

after(async () => {
  if (sbx) await sbx.kill()
})

test('E2B_DOMAIN alone: control plane, commands and files', async () => {
  const r = await sbx.commands.run('echo hi')
  assert.equal(r.stdout, 'hi\n')
  await sbx.files.write('/tmp/domain.txt', 'over the host names')
  assert.equal(await sbx.files.read('/tmp/domain.txt'), 'over the host names')
  const info = await sbx.getInfo()
  assert.equal(info.state, 'running')
  const listed = await Sandbox.list().nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId))
})

test('getHost(port): the sandbox\'s own server, with the traffic token', async () => {
  assert.equal(sbx.getHost(8001), `8001-${sbx.sandboxId}.${domain}`)
  await sbx.files.write('/tmp/www/index.txt', 'served from the sandbox\n')
  await sbx.commands.run('python3 -m http.server 8001 --bind 127.0.0.1 --directory /tmp/www', { background: true })
  const url = `https://${sbx.getHost(8001)}/index.txt`
  let res
  const deadline = Date.now() + 60_000
  for (;;) {
    res = await fetch(url, { headers: { 'e2b-traffic-access-token': sbx.trafficAccessToken } })
    if (res.status === 200 || Date.now() > deadline) break
    await res.arrayBuffer()
    await new Promise((r) => setTimeout(r, 200))
  }
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'served from the sandbox\n')
  // Without a token the sandbox's port is not open to anyone.
  const anon = await fetch(url)
  assert.equal(anon.status, 401)
  await anon.arrayBuffer()
})

test('uploadUrl and downloadUrl: signed URLs, no token sent', async () => {
  const up = await sbx.uploadUrl('/tmp/signed.txt')
  assert.ok(up.startsWith(`https://49983-${sbx.sandboxId}.${domain}/files?`), up)
  const form = new FormData()
  form.append('file', new Blob(['uploaded by URL']), 'signed.txt')
  const put = await fetch(up, { method: 'POST', body: form })
  assert.equal(put.status, 200, await put.clone().text())
  await put.arrayBuffer()
  assert.equal(await sbx.files.read('/tmp/signed.txt'), 'uploaded by URL')

  const down = await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 60 })
  const got = await fetch(down)
  assert.equal(got.status, 200)
  assert.equal(await got.text(), 'uploaded by URL')

  // A signature is for its path and operation only.
  const other = new URL(down)
  other.searchParams.set('path', '/etc/hostname')
  const bad = await fetch(other)
  assert.equal(bad.status, 401)
  await bad.arrayBuffer()
  const asWrite = await fetch(down, { method: 'POST', body: form })
  assert.equal(asWrite.status, 401)
  await asWrite.arrayBuffer()
})

test('the code interpreter at 49999-<id>.<domain>', async () => {
  const ci = await CodeSandbox.create({ timeoutMs: 600_000 })
  try {
    const ex = await ci.runCode('x = 41\nx + 1')
    assert.equal(ex.text, '42')
  } finally {
    await ci.kill()
  }
})
