// The unmodified e2b SDK against agentbox's E2B API (docs/e2b.md). Run by
// integration/e2b_test.go (TestE2BSDK), which starts a daemon and sets
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY; nothing else tells the SDK
// it is not talking to E2B.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import {
  Sandbox,
  CommandExitError,
  TimeoutError,
  AuthenticationError,
  SandboxNotFoundError,
  NotFoundError,
  FileNotFoundError,
  FileType,
  FilesystemEventType,
} from 'e2b'

// E2B_TEST_TEMPLATE: base@gvisor runs the same on the gvisor tier.
const template = process.env.E2B_TEST_TEMPLATE || 'base'
let sbx

before(async () => {
  sbx = await Sandbox.create(template, {
    timeoutMs: 600_000,
    metadata: { suite: 'e2b-sdk', run: process.env.E2B_TEST_RUN || 'x' },
    envs: { SANDBOX_WIDE: 'from-create' },
  })
})

after(async () => {
  if (sbx) await sbx.kill()
})

test('control plane: create, getInfo, list, setTimeout, isRunning', async () => {
  assert.match(sbx.sandboxId, /\S/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, template.split('@')[0])
  assert.equal(info.state, 'running')
  assert.equal(info.metadata.suite, 'e2b-sdk')
  assert.ok(info.startedAt instanceof Date && info.endAt > info.startedAt)

  const listed = await Sandbox.list({ query: { metadata: { run: process.env.E2B_TEST_RUN || 'x' } } }).nextItems()
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
  const none = await Sandbox.list({ query: { metadata: { run: 'no-such-run' } } }).nextItems()
  assert.deepEqual(none, [])

  const before = (await sbx.getInfo()).endAt
  await sbx.setTimeout(900_000)
  const later = (await sbx.getInfo()).endAt
  assert.ok(later > before, `endAt ${later.toISOString()} after setTimeout, was ${before.toISOString()}`)
  assert.equal(await sbx.isRunning(), true)

  const metrics = await sbx.getMetrics()
  assert.ok(Array.isArray(metrics), JSON.stringify(metrics))
  for (const m of metrics) {
    assert.ok(m.timestamp instanceof Date && m.cpuCount >= 1 && m.memTotal > 0, JSON.stringify(m))
  }
})

test('list pages with limit and nextToken', async () => {
  const other = await Sandbox.create(template, { metadata: { run: process.env.E2B_TEST_RUN || 'x' } })
  try {
    const pager = Sandbox.list({ query: { metadata: { run: process.env.E2B_TEST_RUN || 'x' } }, limit: 1 })
    const first = await pager.nextItems()
    assert.equal(first.length, 1)
    assert.equal(pager.hasNext, true)
    const second = await pager.nextItems()
    assert.equal(second.length, 1)
    assert.equal(pager.hasNext, false)
    assert.deepEqual(new Set([first[0].sandboxId, second[0].sandboxId]), new Set([sbx.sandboxId, other.sandboxId]))
  } finally {
    await other.kill()
  }
})

test('connect by id, then kill; a killed sandbox is gone', async () => {
  const other = await Sandbox.create(template)
  const again = await Sandbox.connect(other.sandboxId)
  assert.equal((await again.commands.run('echo connected')).stdout, 'connected\n')
  assert.equal(await Sandbox.kill(other.sandboxId), true)
  assert.equal(await Sandbox.kill(other.sandboxId), false)
  assert.equal(await again.isRunning(), false)
  // What E2B's SDK raises for a sandbox that ended, not a missing file.
  const ended = (err) => err instanceof SandboxNotFoundError || err instanceof TimeoutError
  await assert.rejects(again.commands.run('true'), ended)
  await assert.rejects(again.files.read('/etc/hostname'), ended)
  await assert.rejects(again.files.exists('/etc/hostname'), ended)
  await assert.rejects(Sandbox.connect(other.sandboxId), SandboxNotFoundError)
  await assert.rejects(Sandbox.getInfo(other.sandboxId), (err) => err instanceof NotFoundError || err instanceof SandboxNotFoundError)
})

test('a wrong API key is an AuthenticationError', async () => {
  await assert.rejects(Sandbox.create(template, { apiKey: 'ab_not_a_key' }), AuthenticationError)
})

test('commands.run: stdout, stderr, exit codes', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')

  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    return true
  })
})

test('commands.run: stdin is closed unless asked for', async () => {
  const r = await sbx.commands.run('cat; echo done', { timeoutMs: 20_000 })
  assert.equal(r.stdout, 'done\n')
})

test('an unknown template is an error that names it', async () => {
  await assert.rejects(Sandbox.create('no-such-template'), (err) => {
    assert.match(String(err), /no-such-template/)
    return true
  })
})

test('commands.run: cwd, envs, sandbox-wide envs, callbacks', async () => {
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  const r = await sbx.commands.run('echo "$FOO-$SANDBOX_WIDE"', { envs: { FOO: 'bar' } })
  assert.equal(r.stdout, 'bar-from-create\n')
  const seen = []
  await sbx.commands.run('for i in 1 2 3; do echo line$i; done; echo oops >&2', {
    onStdout: (d) => seen.push(['out', d]),
    onStderr: (d) => seen.push(['err', d]),
  })
  assert.equal(seen.filter(([k]) => k === 'out').map(([, d]) => d).join(''), 'line1\nline2\nline3\n')
  assert.deepEqual(seen.filter(([k]) => k === 'err'), [['err', 'oops\n']])
})

test('commands.run: timeoutMs kills the command', async () => {
  const start = Date.now()
  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1000 }), TimeoutError)
  assert.ok(Date.now() - start < 25_000)
})

test('background commands: pid, list, stdin, wait, kill', async () => {
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  assert.ok(cat.pid > 0)
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === cat.pid), `pid ${cat.pid} in ${JSON.stringify(listed)}`)
  await sbx.commands.sendStdin(cat.pid, 'typed in\n')
  await sbx.commands.closeStdin(cat.pid)
  const done = await cat.wait()
  assert.equal(done.exitCode, 0)
  assert.equal(done.stdout, 'typed in\n')

  const sleeper = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  assert.equal(await sbx.commands.kill(sleeper.pid), true)
  await assert.rejects(sleeper.wait(), CommandExitError)
  assert.equal(await sbx.commands.kill(sleeper.pid), false)

  const later = await sbx.commands.run('sleep 1; echo late', { background: true })
  const attached = await sbx.commands.connect(later.pid)
  const r = await attached.wait()
  assert.equal(r.stdout, 'late\n')
})

test('files: write, read, list, exists, getInfo, makeDir, rename, remove', async () => {
  const info = await sbx.files.write('/tmp/e2b/a.txt', 'hello')
  assert.equal(info.path, '/tmp/e2b/a.txt')
  assert.equal(info.name, 'a.txt')
  assert.equal(await sbx.files.read('/tmp/e2b/a.txt'), 'hello')
  const bytes = new Uint8Array([0, 1, 2, 250, 255])
  await sbx.files.write('/tmp/e2b/b.bin', bytes.buffer)
  assert.deepEqual(await sbx.files.read('/tmp/e2b/b.bin', { format: 'bytes' }), bytes)

  const entries = await sbx.files.list('/tmp/e2b')
  assert.deepEqual(entries.map((e) => e.name).sort(), ['a.txt', 'b.bin'])
  const a = entries.find((e) => e.name === 'a.txt')
  assert.equal(a.type, FileType.FILE)
  assert.equal(a.size, 5)
  assert.equal(a.path, '/tmp/e2b/a.txt')

  assert.equal(await sbx.files.exists('/tmp/e2b/a.txt'), true)
  assert.equal(await sbx.files.exists('/tmp/e2b/nope'), false)
  const dirInfo = await sbx.files.getInfo('/tmp/e2b')
  assert.equal(dirInfo.type, FileType.DIR)

  assert.equal(await sbx.files.makeDir('/tmp/e2b/sub/deep'), true)
  assert.equal(await sbx.files.makeDir('/tmp/e2b/sub/deep'), false)
  const moved = await sbx.files.rename('/tmp/e2b/a.txt', '/tmp/e2b/sub/c.txt')
  assert.equal(moved.path, '/tmp/e2b/sub/c.txt')
  assert.equal(await sbx.files.read('/tmp/e2b/sub/c.txt'), 'hello')
  await assert.rejects(sbx.files.read('/tmp/e2b/a.txt'), FileNotFoundError)

  await sbx.files.write([
    { path: '/tmp/e2b/many/1.txt', data: 'one' },
    { path: '/tmp/e2b/many/2.txt', data: 'two' },
  ])
  assert.equal(await sbx.files.read('/tmp/e2b/many/2.txt'), 'two')

  await sbx.files.remove('/tmp/e2b')
  assert.equal(await sbx.files.exists('/tmp/e2b'), false)
  await sbx.files.remove('/tmp/e2b') // gone already: no error, as with E2B
})

test('user: commands and files as root or user, owned by them', async () => {
  const asRoot = { user: 'root' }
  assert.equal((await sbx.commands.run('whoami', asRoot)).stdout, 'root\n')
  assert.equal((await sbx.commands.run('whoami; pwd', { user: 'user', cwd: '~' })).stdout, 'user\n/home/user\n')
  // What the user may not do fails as it does for them.
  await assert.rejects(sbx.commands.run('touch /root/not-yours', { user: 'user' }), CommandExitError)

  // Written as a user: the file and the directories made for it are theirs.
  await sbx.files.write('/tmp/owned/sub/by-user.txt', 'u', { user: 'user' })
  await sbx.files.write('/tmp/owned/by-root.txt', 'r', asRoot)
  await sbx.files.write([
    { path: '/tmp/owned/many/1.txt', data: 'one' },
    { path: '/tmp/owned/many/2.txt', data: 'two' },
  ], { user: 'user' })
  assert.equal(await sbx.files.makeDir('/tmp/owned/made', { user: 'user' }), true)
  const owners = await sbx.commands.run('cd /tmp/owned && stat -c "%n %U:%G" sub sub/by-user.txt by-root.txt many/2.txt made', asRoot)
  assert.equal(owners.stdout, 'sub user:user\nsub/by-user.txt user:user\nby-root.txt root:root\nmany/2.txt user:user\nmade user:user\n')
  assert.equal(await sbx.files.read('/tmp/owned/sub/by-user.txt', { user: 'user' }), 'u')

  // A relative path is under the user's home, as with E2B.
  await sbx.files.write('rel.txt', 'in home', { user: 'user' })
  assert.equal((await sbx.commands.run('cat /home/user/rel.txt; stat -c %U /home/user/rel.txt', asRoot)).stdout, 'in homeuser\n')
  assert.equal(await sbx.files.read('rel.txt', { user: 'user' }), 'in home')
  assert.equal(await sbx.files.exists('rel.txt', { user: 'user' }), true)
  assert.equal(await sbx.files.exists('rel.txt', asRoot), false)
  assert.ok((await sbx.files.list('.', { user: 'user' })).some((e) => e.path === '/home/user/rel.txt'))

  // A user the sandbox does not have is refused, as envd refuses it.
  const nobody = { user: 'no-such-user' }
  await assert.rejects(sbx.commands.run('true', nobody), AuthenticationError)
  await assert.rejects(sbx.files.write('/tmp/x', 'x', nobody), AuthenticationError)
  await assert.rejects(sbx.files.read('/etc/hostname', nobody), AuthenticationError)
  await assert.rejects(sbx.files.list('/tmp', nobody), AuthenticationError)
  await assert.rejects(sbx.files.makeDir('/tmp/y', nobody), AuthenticationError)
  assert.equal(await sbx.files.exists('/tmp/x'), false)
})

test('files: gzip uploads (one, many, a stream) and gzip reads', async () => {
  const big = 'compressible text '.repeat(20_000)
  const info = await sbx.files.write('/tmp/gz/big.txt', big, { gzip: true })
  assert.equal(info.path, '/tmp/gz/big.txt')
  assert.equal(await sbx.files.read('/tmp/gz/big.txt'), big)
  assert.equal(await sbx.files.read('/tmp/gz/big.txt', { gzip: true }), big)

  const bytes = new Uint8Array([0, 1, 2, 250, 255])
  const many = await sbx.files.write([
    { path: '/tmp/gz/a.bin', data: bytes.buffer },
    { path: '/tmp/gz/b.txt', data: 'bee' },
  ], { gzip: true, user: 'user' })
  assert.deepEqual(many.map((f) => f.path).sort(), ['/tmp/gz/a.bin', '/tmp/gz/b.txt'])
  assert.deepEqual(await sbx.files.read('/tmp/gz/a.bin', { format: 'bytes' }), bytes)
  assert.equal((await sbx.commands.run('stat -c %U /tmp/gz/b.txt', { user: 'root' })).stdout, 'user\n')

  const enc = new TextEncoder()
  const stream = new ReadableStream({
    start(c) {
      c.enqueue(enc.encode('streamed, '))
      c.enqueue(enc.encode('then gzipped'))
      c.close()
    },
  })
  await sbx.files.write('/tmp/gz/stream.txt', stream, { gzip: true })
  assert.equal(await sbx.files.read('/tmp/gz/stream.txt'), 'streamed, then gzipped')
  await sbx.files.remove('/tmp/gz')
})

test('files.watchDir reports changes', async () => {
  await sbx.files.makeDir('/tmp/watched')
  const events = []
  const handle = await sbx.files.watchDir('/tmp/watched', (ev) => events.push(ev), { timeoutMs: 0 })
  try {
    await sbx.files.write('/tmp/watched/new.txt', 'x')
    const deadline = Date.now() + 30_000
    while (!events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100))
    }
    assert.ok(events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE), JSON.stringify(events))
  } finally {
    await handle.stop()
  }
})

test('pause, then connect resumes', async () => {
  const other = await Sandbox.create(template)
  try {
    await other.files.write('/tmp/kept', 'still here')
    assert.equal(await other.pause(), true)
    assert.equal((await other.getInfo()).state, 'paused')
    const back = await Sandbox.connect(other.sandboxId)
    assert.equal((await back.getInfo()).state, 'running')
    assert.equal(await back.files.read('/tmp/kept'), 'still here')
  } finally {
    await other.kill()
  }
})

// waitState polls E2B's getInfo until the sandbox is in state.
async function waitState(id, state) {
  const deadline = Date.now() + 120_000
  let last
  while (Date.now() < deadline) {
    last = (await Sandbox.getInfo(id)).state
    if (last === state) return
    await new Promise((r) => setTimeout(r, 200))
  }
  assert.fail(`sandbox ${id} is ${last}, not ${state}, after 120 s`)
}

test('lifecycle: onTimeout pause pauses at the timeout; autoResume resumes on use', async () => {
  // A short timeout: each pauses a few seconds after it starts.
  const [auto, manual] = await Promise.all([
    Sandbox.create(template, { timeoutMs: 6_000, lifecycle: { onTimeout: 'pause', autoResume: true } }),
    Sandbox.create(template, { timeoutMs: 6_000, lifecycle: { onTimeout: 'pause' } }),
  ])
  try {
    assert.deepEqual((await auto.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
    assert.deepEqual((await manual.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
    // Resumes it first should it have paused already.
    await auto.files.write('/root/kept.txt', 'kept')
    await Promise.all([waitState(auto.sandboxId, 'paused'), waitState(manual.sandboxId, 'paused')])

    // autoResume: using it resumes it, files and all, for a new timeout.
    assert.equal((await auto.commands.run('cat /root/kept.txt')).stdout, 'kept')

    // Without: it is not running until connect resumes it.
    assert.equal(await manual.isRunning(), false)
    await assert.rejects(manual.commands.run('true'), (err) => err instanceof SandboxNotFoundError || err instanceof TimeoutError)
    const back = await Sandbox.connect(manual.sandboxId)
    assert.equal((await back.getInfo()).state, 'running')
    assert.equal((await back.commands.run('echo back')).stdout, 'back\n')

    // At its new timeout the resumed one pauses again: kept, not killed;
    // isRunning() resumes it too, its request being use, as with E2B.
    await waitState(auto.sandboxId, 'paused')
    assert.equal(await auto.isRunning(), true)
    assert.equal(await auto.files.read('/root/kept.txt'), 'kept')
  } finally {
    await Promise.all([auto.kill(), manual.kill()])
  }
})

test('pty: create, sendInput, resize, kill', async () => {
  const dec = new TextDecoder()
  let screen = ''
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { screen += dec.decode(d) } })
  const waitFor = async (re) => {
    const deadline = Date.now() + 30_000
    while (!re.test(screen) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
    assert.match(screen, re)
  }
  const enc = new TextEncoder()
  await sbx.pty.sendInput(term.pid, enc.encode('echo pty-$((6*7))\n'))
  await waitFor(/pty-42/)
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(term.pid, enc.encode('stty size\n'))
  await waitFor(/30 100/)
  assert.equal(await sbx.pty.kill(term.pid), true)
  await assert.rejects(term.wait(), CommandExitError)
})

test('snapshots: create, start a sandbox from one, list, delete; fork', async () => {
  // Not under /tmp, which gVisor keeps in memory: a snapshot has the disk's files.
  await sbx.files.write('/root/e2b-snap.txt', 'in the snapshot')
  const snap = await sbx.createSnapshot({ name: `e2b-${process.env.E2B_TEST_RUN || 'x'}` })
  assert.match(snap.snapshotId, /\S/)
  assert.deepEqual(snap.names, [`e2b-${process.env.E2B_TEST_RUN || 'x'}`])
  const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
  assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed))

  const fromSnap = await Sandbox.create(snap.snapshotId)
  try {
    assert.equal(await fromSnap.files.read('/root/e2b-snap.txt'), 'in the snapshot')
  } finally {
    await fromSnap.kill()
  }

  const forks = await sbx.fork({ count: 2, timeoutMs: 120_000 })
  assert.equal(forks.length, 2)
  try {
    for (const f of forks) {
      assert.ok(!(f instanceof Error), String(f))
      assert.notEqual(f.sandboxId, sbx.sandboxId)
      assert.equal(await f.files.read('/root/e2b-snap.txt'), 'in the snapshot')
    }
  } finally {
    for (const f of forks) if (!(f instanceof Error)) await f.kill()
  }

  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
})

// agentbox's own record of a sandbox (its REST API beside /e2b), to see
// what an E2B network setting became.
async function agentboxNetwork(id) {
  const base = process.env.E2B_API_URL.replace(/\/e2b$/, '')
  const res = await fetch(`${base}/v1/sandboxes/${id}`, {
    headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` },
  })
  assert.equal(res.status, 200)
  const { network } = await res.json()
  return { egress: network.egress, allow: network.allow || [], deny: network.deny || [] }
}

test('network: allowInternetAccess and denyOut at create, then updateNetwork', async () => {
  const s = await Sandbox.create(template, {
    timeoutMs: 300_000,
    allowInternetAccess: true,
    network: { denyOut: ['203.0.113.0/24'] },
  })
  try {
    assert.deepEqual(await agentboxNetwork(s.sandboxId), { egress: 'internet', allow: [], deny: ['203.0.113.0/24'] })
    // denyOut 0.0.0.0/0 closes egress; allowOut is what stays open.
    await s.updateNetwork({ allowOut: ['198.51.100.7'], denyOut: ['0.0.0.0/0'] })
    assert.deepEqual(await agentboxNetwork(s.sandboxId), { egress: 'custom', allow: ['198.51.100.7'], deny: [] })
    // Fields left out are cleared: open again.
    await s.updateNetwork({})
    assert.deepEqual(await agentboxNetwork(s.sandboxId), { egress: 'internet', allow: [], deny: [] })
    // What agentbox lacks says so.
    await assert.rejects(s.updateNetwork({ rules: { 'api.example.com': [{ transform: { headers: { 'X-A': 'b' } } }] } }), /network rules/)
  } finally {
    await s.kill()
  }
})
