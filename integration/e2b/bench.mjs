// Sandbox.create() + commands.run('echo hi') + kill() through the e2b SDK
// (docs/e2b.md), timed per round after 2 warm-up rounds. Run by
// `agentbox bench` (internal/bench/e2b.go) with the E2B variables set;
// prints {"samples_ms": [...], "p50", "min", "max"} in ms.
import { Sandbox } from 'e2b'
const n = Number(process.argv[2] || 20)
const template = process.env.E2B_BENCH_TEMPLATE || 'base'
const times = []
for (let i = 0; i < n + 2; i++) {
  const t = performance.now()
  const sbx = await Sandbox.create(template)
  const r = await sbx.commands.run('echo hi')
  if (r.stdout !== 'hi\n') throw new Error(r.stdout)
  await sbx.kill()
  if (i >= 2) times.push(performance.now() - t)
}
const sorted = [...times].sort((a, b) => a - b)
console.log(JSON.stringify({ samples_ms: times, p50: sorted[Math.floor(n / 2)], min: sorted[0], max: sorted[n - 1] }))
