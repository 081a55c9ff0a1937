// Kills what a run left behind: the sandboxes whose metadata carries
// run=<COMPAT_RUN_ID>, or with --all every sandbox the API lists (for a daemon
// run.sh started itself). Best effort and bounded: it never fails the run and
// gives up after 60 s. Uses the E2B routes GET /v2/sandboxes and
// DELETE /sandboxes/{id}.
//
//   node sweep.js [--all]      (env as for the tests)

import { Sandbox } from 'e2b'

const deadline = setTimeout(() => {
  console.error('sweep: gave up after 60 s')
  process.exit(0)
}, 60_000)

const all = process.argv.includes('--all')
const runId = process.env.COMPAT_RUN_ID
try {
  if (!all && !runId) throw new Error('COMPAT_RUN_ID is not set')
  const paginator = Sandbox.list({
    query: { state: ['running', 'paused'], ...(all ? {} : { metadata: { run: runId } }) },
    requestTimeoutMs: 15_000,
  })
  const ids = []
  while (paginator.hasNext) {
    ids.push(...(await paginator.nextItems()).map((s) => s.sandboxId))
  }
  const killed = await Promise.allSettled(ids.map((id) => Sandbox.kill(id, { requestTimeoutMs: 30_000 })))
  const failed = killed.filter((k) => k.status === 'rejected')
  if (ids.length > 0) {
    console.error(`sweep: killed ${ids.length - failed.length} leftover sandbox(es)` +
      (failed.length ? `; ${failed.length} failed: ${failed[0].reason}` : ''))
  }
} catch (err) {
  console.error(`sweep: ${err.message}`)
}
clearTimeout(deadline)
