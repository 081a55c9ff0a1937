// Benchmark: daytona.create() → first process.executeCommand through the
// real Daytona SDK, beside the same flow on sandboxd's native API (create →
// exec), interleaved in one run against one daemon. Prints p50/p95 in ms.
//
//   run.sh --bench [N]      (N iterations of each, default 10)

import { performance } from 'node:perf_hooks'
import { Daytona } from '@daytonaio/sdk'

const n = Number(process.argv[2] ?? 10)
const api = process.env.SANDBOXD_URL
const token = process.env.SANDBOXD_TOKEN
const daytona = new Daytona()

async function native() {
  const h = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }
  const t0 = performance.now()
  const res = await fetch(`${api}/v1/sandboxes`, { method: 'POST', headers: h, body: JSON.stringify({ image: 'sandboxd/base:bookworm' }) })
  if (res.status !== 201) throw new Error(`native create: ${res.status} ${await res.text()}`)
  const { id } = await res.json()
  const ex = await fetch(`${api}/v1/sandboxes/${id}/exec`, { method: 'POST', headers: h, body: JSON.stringify({ command: 'true' }) })
  if (ex.status !== 200) throw new Error(`native exec: ${ex.status}`)
  await ex.json()
  const ms = performance.now() - t0
  await fetch(`${api}/v1/sandboxes/${id}`, { method: 'DELETE', headers: h })
  return ms
}

async function sdk() {
  const t0 = performance.now()
  const sb = await daytona.create()
  await sb.process.executeCommand('true')
  const ms = performance.now() - t0
  await daytona.delete(sb)
  return ms
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

const a = [], b = []
for (let i = 0; i < n; i++) {
  a.push(await sdk())
  b.push(await native())
}
const row = (name, xs) => console.log(`${name.padEnd(48)} ${String(xs.length).padStart(3)} ${pct(xs, 50).toFixed(0).padStart(8)} ${pct(xs, 95).toFixed(0).padStart(8)}`)
console.log(`${'create → first command (ms)'.padEnd(48)}   n      p50      p95`)
row('daytona SDK: create → process.executeCommand', a)
row('native API: POST /v1/sandboxes → exec', b)
await daytona[Symbol.asyncDispose]?.()
process.exit(0)
