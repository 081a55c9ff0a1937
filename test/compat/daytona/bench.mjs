// Benchmark: daytona.create() → first process.executeCommand through the
// real Daytona SDK, beside the same flow on sandboxd's native API (create →
// exec), each with the warm pool on and off, interleaved in one run
// against one daemon (../benchpool.mjs says how the pool is toggled).
// Prints n, p50/p95 in ms.
//
//   run.sh --bench [N]      (N rounds, default 10)

import { Daytona } from '@daytonaio/sdk'
import { performance } from 'node:perf_hooks'
import { pooling } from '../benchpool.mjs'

const n = Number(process.argv[2] ?? 10)
const { measure } = pooling(process.env.SANDBOXD_URL, process.env.SANDBOXD_TOKEN)
const daytona = new Daytona()

async function sdk() {
  const t0 = performance.now()
  const sb = await daytona.create()
  await sb.process.executeCommand('true')
  const ms = performance.now() - t0
  await daytona.delete(sb)
  return { ms, id: sb.id }
}

let warmSb
await measure({
  n,
  title: 'create → first command (ms)',
  sdkName: 'daytona SDK: create → process.executeCommand',
  sdk,
  warm: {
    create: async () => { warmSb = await daytona.create(); return warmSb.id },
    remove: () => daytona.delete(warmSb),
  },
  execBody: { command: 'true' },
})
await daytona[Symbol.asyncDispose]?.()
process.exit(0)
