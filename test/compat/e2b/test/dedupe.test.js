// Create dedupe (README "Create dedupe"): identical creates are
// never collapsed into one sandbox; only a create whose client went away
// before its answer is adopted, by one identical retry inside the replay
// window, and destroyed after it if nobody adopts it.
//
// run.sh starts its daemon with a short window (SANDBOXD_E2B_REPLAY_WINDOW)
// and tells this file (COMPAT_E2B_REPLAY_WINDOW_MS); against another
// daemon the default 10 s applies. Nothing here sleeps on latency: every
// wait polls a condition with a generous deadline.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { Sandbox } from 'e2b'

import { BASE, RUN_ID, killQuietly, listAll, metadataFor, waitFor } from './helpers.js'
import { nodeURLs, withoutPool } from '../../native.js'

const WINDOW_MS = Number(process.env.COMPAT_E2B_REPLAY_WINDOW_MS || 10_000)

/** The running sandboxes (E2B's list) of this run with `nonce`, sorted ids. */
async function listed(nonce) {
  const items = await listAll({ query: { metadata: { run: RUN_ID, nonce } } })
  return items.map((s) => s.sandboxId).sort()
}

/**
 * The ids of the daemon's rows for creates with `nonce`, in any state (the
 * native API lists sandboxes still being created; E2B's does not).
 */
async function serverRows(nonce) {
  const res = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes?tag.nonce=${encodeURIComponent(nonce)}`, {
    headers: { Authorization: `Bearer ${process.env.SANDBOXD_TOKEN}` },
  })
  if (!res.ok) throw new Error(`native list: ${res.status} ${await res.text()}`)
  return (await res.json()).items.map((s) => s.id)
}

/**
 * How many creates the daemon has marked undelivered so far
 * (sandboxd_creates_undelivered_total on /metrics; in a cluster, the sum
 * over its nodes, since the create may run on any).
 */
async function undeliveredCount() {
  let n = 0
  for (const base of await nodeURLs()) {
    const res = await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${process.env.SANDBOXD_TOKEN}` } })
    if (!res.ok) throw new Error(`metrics: ${res.status}`)
    const line = (await res.text()).split('\n').find((l) => l.startsWith('sandboxd_creates_undelivered_total '))
    n += line ? Number(line.split(' ')[1]) : 0
  }
  return n
}

/**
 * Sends Sandbox.create(BASE, {metadata}) and aborts it once the daemon has
 * started on it (its row exists), before the answer; returns the id of the
 * sandbox the daemon is making. Returns null when the answer came first
 * (the engine was faster than the poll): that sandbox is killed and the
 * caller tries again with a fresh body.
 */
async function abortAfterServerStarted(metadata) {
  // Counted before the create: between seeing its row and the abort
  // nothing slower than the list may run, or the answer comes first.
  const before = await undeliveredCount()
  const ac = new AbortController()
  let answered = false
  const settled = Sandbox.create(BASE, { metadata, signal: ac.signal }).then(
    async (sbx) => {
      answered = true
      await killQuietly(sbx.sandboxId)
    },
    (err) => err,
  )
  const rows = await waitFor(async () => {
    if (answered) return ['answered']
    const r = await serverRows(metadata.nonce)
    return r.length > 0 && r
  }, { timeoutMs: 60_000, intervalMs: 10, what: 'the daemon to start on the create' })
  ac.abort()
  const err = await settled
  if (answered) return null
  assert.ok(err, 'the aborted create failed')
  assert.equal(rows.length, 1)
  // The daemon learns that its client went away when it sees the
  // connection close: a retry sent before that is a create of its own.
  // Wait until it has marked the create undelivered.
  await waitFor(async () => (await undeliveredCount()) > before,
    { timeoutMs: 60_000, intervalMs: 10, what: 'the daemon to mark the aborted create undelivered' })
  return rows[0]
}

/** abortAfterServerStarted with up to five fresh bodies. */
async function abortedCreate(test, ids) {
  for (let attempt = 0; attempt < 5; attempt++) {
    const metadata = metadataFor(test)
    const id = await abortAfterServerStarted(metadata)
    if (id) {
      ids.add(id)
      return { metadata, id }
    }
  }
  throw new Error('five creates in a row answered before they could be aborted')
}

describe('create dedupe', () => {
  it('five sequential identical creates give five sandboxes', { timeout: 300_000 }, async (t) => {
    const metadata = metadataFor('dedupe-sequential')
    const ids = new Set()
    t.after(() => Promise.all([...ids].map(killQuietly)))
    for (let i = 0; i < 5; i++) {
      const sbx = await Sandbox.create(BASE, { metadata })
      assert.ok(!ids.has(sbx.sandboxId), `create ${i + 1} answered ${sbx.sandboxId} again`)
      ids.add(sbx.sandboxId)
    }
    assert.deepEqual(await listed(metadata.nonce), [...ids].sort())
  })

  it('Promise.all of eight identical creates gives eight sandboxes', { timeout: 300_000 }, async (t) => {
    const metadata = metadataFor('dedupe-concurrent')
    const ids = new Set()
    t.after(() => Promise.all([...ids].map(killQuietly)))
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => Sandbox.create(BASE, { metadata })))
    for (const r of results) if (r.status === 'fulfilled') ids.add(r.value.sandboxId)
    assert.deepEqual(results.filter((r) => r.status === 'rejected').map((r) => String(r.reason)), [])
    assert.equal(ids.size, 8, `want eight sandboxes, got ${[...ids].join(', ')}`)
    assert.deepEqual(await listed(metadata.nonce), [...ids].sort())
  })

  it('a create aborted after the server started is adopted by its identical retry; nothing is left after the window',
    { timeout: 300_000 }, async (t) => {
      const ids = new Set()
      t.after(() => Promise.all([...ids].map(killQuietly)))
      // Pooled creates answer before an abort can reach them; against a
      // daemon whose token is not an admin's the pool stays, and
      // abortedCreate tries fresh bodies instead.
      await withoutPool(t)

      const { metadata, id: abandoned } = await abortedCreate('dedupe-abort', ids)
      const retry = await Sandbox.create(BASE, { metadata })
      ids.add(retry.sandboxId)
      assert.equal(retry.sandboxId, abandoned, 'the retry adopts the sandbox its aborted create made')
      assert.equal((await retry.commands.run('echo adopted')).stdout, 'adopted\n')
      assert.deepEqual(await listed(metadata.nonce), [abandoned], 'one sandbox for the create and its retry')

      // Delivered now: an identical create makes its own.
      const later = await Sandbox.create(BASE, { metadata })
      ids.add(later.sandboxId)
      assert.notEqual(later.sandboxId, abandoned, 'a delivered sandbox is never given out again')

      // An aborted create nobody retries is destroyed once the window passes,
      // and the delivered ones stay.
      const orphan = await abortedCreate('dedupe-orphan', ids)
      await waitFor(async () => (await serverRows(orphan.metadata.nonce)).length === 0, {
        timeoutMs: WINDOW_MS + 60_000,
        what: `the unadopted sandbox ${orphan.id} to be destroyed after the ${WINDOW_MS} ms window`,
      })
      assert.deepEqual(await listed(metadata.nonce), [abandoned, later.sandboxId].sort(),
        'after the window the two delivered sandboxes are still there')
    })
})
