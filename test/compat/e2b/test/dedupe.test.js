// Create dedupe (DESIGN.md section 7): identical create bodies within the
// replay window (10 s) yield one sandbox; after it, a new one.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { Sandbox } from 'e2b'

import { BASE, RUN_ID, killQuietly, listAll, metadataFor } from './helpers.js'

const CALLERS = 50
const REPLAY_WINDOW_MS = 10_000

describe('create dedupe', () => {
  it(`${CALLERS} identical concurrent creates give one sandbox; after the replay window, a new one`,
    { timeout: 300_000 }, async (t) => {
      const metadata = metadataFor('dedupe', { nonce: randomUUID() }) // one body for every caller
      const envs = { DEDUPE: 'yes' }
      const ids = new Set()
      t.after(() => Promise.all([...ids].map(killQuietly)))

      const results = await Promise.allSettled(
        Array.from({ length: CALLERS }, () => Sandbox.create(BASE, { metadata, envs })),
      )
      for (const r of results) if (r.status === 'fulfilled') ids.add(r.value.sandboxId)
      const failures = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason))
      assert.deepEqual(failures, [], 'every identical create succeeds')
      assert.equal(ids.size, 1, `want one sandbox, got ${[...ids].join(', ')}`)
      const [first] = ids

      const listed = await listAll({ query: { metadata: { run: RUN_ID, nonce: metadata.nonce } } })
      assert.deepEqual(listed.map((s) => s.sandboxId), [first], 'nothing else was created behind the scenes')
      assert.equal((await results[0].value.commands.run('echo $DEDUPE')).stdout, 'yes\n')

      await sleep(REPLAY_WINDOW_MS + 2_000)
      const later = await Sandbox.create(BASE, { metadata, envs })
      ids.add(later.sandboxId)
      assert.notEqual(later.sandboxId, first, 'after the replay window the same body creates anew')
      const both = await listAll({ query: { metadata: { run: RUN_ID, nonce: metadata.nonce } } })
      assert.deepEqual(both.map((s) => s.sandboxId).sort(), [first, later.sandboxId].sort())
    })
})
