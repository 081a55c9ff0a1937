// Benchmark: Sandbox.create() → first commands.run through the real E2B
// SDK, beside the same flow on sandboxd's native API (create → exec),
// each with the warm pool on and off, interleaved in one run against one
// daemon (../benchpool.mjs says how the pool is toggled). Prints n,
// p50/p95 in ms.
//
//   run.sh --bench [N]      (N rounds, default 10)
//
// Expect the SDK's pooled row to say "served by the pool: 0/N": the
// facade's creates without an Idempotency-Key run under a delivery claim
// (internal/service/delivery.go), which names the sandbox's id before the
// chain, and the pool serves only creates without a chosen id. The row
// stays, so that the day it is fixed the bench shows it.

import { Sandbox } from 'e2b'
import { performance } from 'node:perf_hooks'
import { pooling } from '../benchpool.mjs'

const n = Number(process.argv[2] ?? 10)
// The admin token: the bench sets the pool (PUT /v1/pools).
const { measure } = pooling(process.env.SANDBOXD_URL.replace(/\/$/, ''), process.env.SANDBOXD_TOKEN)

let i = 0
async function sdk() {
  const t0 = performance.now()
  // A distinct body each time, as under --e2b-body-dedupe=body identical bodies are deduplicated.
  const sbx = await Sandbox.create('base', { metadata: { bench: String(i++) } })
  await sbx.commands.run('true')
  const ms = performance.now() - t0
  await sbx.kill()
  return { ms, id: sbx.sandboxId }
}

let warmSbx
await measure({
  n,
  title: 'create → first command (ms)',
  sdkName: 'e2b SDK: Sandbox.create → commands.run',
  sdk,
  warm: {
    create: async () => { warmSbx = await Sandbox.create('base', { metadata: { bench: 'warm-up' } }); return warmSbx.sandboxId },
    remove: () => warmSbx.kill(),
  },
  execBody: { cmd: ['true'] },
})
