// Benchmark: Sandbox.create() → first commands.run through the real E2B
// SDK, beside the same flow on sandboxd's native API (create → exec),
// interleaved in one run against one daemon. Prints p50/p95 in ms.
//
//   run.sh --bench [N]      (N iterations of each, default 10)

import { performance } from 'node:perf_hooks'
import { Sandbox } from 'e2b'

const n = Number(process.argv[2] ?? 10)
const api = process.env.E2B_API_URL
const token = process.env.E2B_API_KEY

async function native() {
  const h = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }
  const t0 = performance.now()
  const res = await fetch(`${api}/v1/sandboxes`, { method: 'POST', headers: h, body: JSON.stringify({ image: 'sandboxd/base:bookworm' }) })
  if (res.status !== 201) throw new Error(`native create: ${res.status} ${await res.text()}`)
  const { id } = await res.json()
  const ex = await fetch(`${api}/v1/sandboxes/${id}/exec`, { method: 'POST', headers: h, body: JSON.stringify({ cmd: ['true'] }) })
  if (ex.status !== 200) throw new Error(`native exec: ${ex.status}`)
  await ex.json()
  const ms = performance.now() - t0
  await fetch(`${api}/v1/sandboxes/${id}`, { method: 'DELETE', headers: h })
  return ms
}

async function sdk(i) {
  const t0 = performance.now()
  // A distinct body each time, as under --e2b-body-dedupe=body identical bodies are deduplicated.
  const sbx = await Sandbox.create('base', { metadata: { bench: String(i) } })
  await sbx.commands.run('true')
  const ms = performance.now() - t0
  await sbx.kill()
  return ms
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

const a = [], b = []
for (let i = 0; i < n; i++) {
  a.push(await sdk(i))
  b.push(await native())
}
const row = (name, xs) => console.log(`${name.padEnd(44)} ${String(xs.length).padStart(3)} ${pct(xs, 50).toFixed(0).padStart(8)} ${pct(xs, 95).toFixed(0).padStart(8)}`)
console.log(`${'create → first command (ms)'.padEnd(44)}   n      p50      p95`)
row('e2b SDK: Sandbox.create → commands.run', a)
row('native API: POST /v1/sandboxes → exec', b)
