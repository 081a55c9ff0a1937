// The warm pool (README "Warm pool"): daytona.create of a pooled
// image is a claim of an idle sandbox, which this create's env, labels and
// Daytona's user reach as if it had been made for it.
//
// The daemon lists its idle sandboxes' ids (GET /v1/pools, admin): a
// create answered with one of the ids listed just before it came from the
// pool. Another file's create may take that sandbox first; then this one
// tries again, at most five times.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { createSandbox, newClient, nonce, waitFor } from './helpers.js'
import { idleIDs } from '../../native.js'

const daytona = newClient()

describe('warm pool', () => {
  it('daytona.create is a claim of an idle sandbox, with this create\'s env, labels and user', { timeout: 300_000 }, async (t) => {
    if ((await idleIDs()) === null) return t.skip('the token is not an admin\'s: the pool cannot be read')
    for (let attempt = 0; attempt < 5; attempt++) {
      const idle = await waitFor(async () => {
        const ids = await idleIDs()
        return ids.length > 0 && ids
      }, { timeoutMs: 180_000, what: 'an idle sandbox in the pool' })
      const value = nonce()
      const sandbox = await createSandbox(t, daytona, 'pool-claim', { envVars: { POOL_CLAIM: value }, labels: { claim: value } })
      if (!idle.includes(sandbox.id)) continue // another create took it first

      const res = await sandbox.process.executeCommand('echo "$POOL_CLAIM" "$(id -un)" "$HOME"')
      assert.equal(res.exitCode, 0)
      assert.equal(res.result.trim(), `${value} daytona /home/daytona`)
      assert.equal((await daytona.get(sandbox.id)).labels.claim, value)
      assert.ok(!(await idleIDs()).includes(sandbox.id), 'a claimed sandbox leaves the pool')
      return
    }
    assert.fail('five creates in a row were cold while the pool listed idle sandboxes')
  })
})
