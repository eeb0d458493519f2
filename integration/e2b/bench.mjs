// p50 of Sandbox.create() + commands.run('echo hi') + kill() (docs/e2b.md).
import { Sandbox } from 'e2b'
const n = Number(process.argv[2] || 20)
const times = []
for (let i = 0; i < n + 2; i++) {
  const t = performance.now()
  const sbx = await Sandbox.create()
  const r = await sbx.commands.run('echo hi')
  if (r.stdout !== 'hi\n') throw new Error(r.stdout)
  await sbx.kill()
  if (i >= 2) times.push(performance.now() - t)
}
times.sort((a, b) => a - b)
console.log(JSON.stringify({ p50: times[Math.floor(n / 2)], min: times[0], max: times[n - 1] }))
