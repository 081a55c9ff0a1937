// The warm pool (README "Warm pool"): Sandbox.create of a pooled
// template is a claim of an idle sandbox, which this create's env and
// metadata reach as if it had been made for it.
//
// The daemon lists its idle sandboxes' ids (GET /v1/pools, admin): a
// create answered with one of the ids listed just before it came from the
// pool. Another file's create may take that sandbox first; then this one
// tries again, at most five times.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { describe, it } from 'node:test'

import { Sandbox } from 'e2b'

import { BASE, createSandbox, waitFor } from './helpers.js'
import { idleIDs } from '../../native.js'

describe('warm pool', () => {
  it('Sandbox.create is a claim of an idle sandbox, with this create\'s env and metadata', { timeout: 300_000 }, async (t) => {
    if ((await idleIDs()) === null) return t.skip('the token is not an admin\'s: the pool cannot be read')
    for (let attempt = 0; attempt < 5; attempt++) {
      // The pool may be empty for a while (dedupe's abort case empties it).
      const idle = await waitFor(async () => {
        const ids = await idleIDs()
        return ids.length > 0 && ids
      }, { timeoutMs: 180_000, what: 'an idle sandbox in the pool' })
      const value = randomUUID()
      const sbx = await createSandbox(t, 'pool-claim', { envs: { POOL_CLAIM: value }, metadata: { claim: value } })
      if (!idle.includes(sbx.sandboxId)) continue // another create took it first

      assert.equal((await sbx.commands.run('echo "$POOL_CLAIM" "$(id -un)" "$HOME"')).stdout, `${value} user /home/user\n`)
      const info = await Sandbox.getInfo(sbx.sandboxId)
      assert.equal(info.metadata.claim, value)
      assert.equal(info.templateId, BASE)
      assert.ok(!(await idleIDs()).includes(sbx.sandboxId), 'a claimed sandbox leaves the pool')
      return
    }
    assert.fail('five creates in a row were cold while the pool listed idle sandboxes')
  })
})
