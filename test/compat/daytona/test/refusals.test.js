// What the facade does not do is refused, clearly, in Daytona's error shape:
// create fields it cannot honour are a 400 naming the field (never dropped).

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { DaytonaBadRequestError } from '@daytonaio/sdk'

import { labelsFor, listAll, newClient } from './helpers.js'

const daytona = newClient()

describe('refusals', () => {
  for (const [field, value] of [
    ['linkedSandbox', 'some-other-sandbox'],
    ['ttlMinutes', 30],
    ['secrets', { TOKEN: 'vault-secret' }],
  ]) {
    it(`create with ${field} is a 400 that names it, and creates nothing`, { timeout: 60_000 }, async () => {
      const labels = labelsFor(`refuse-${field}`)
      await assert.rejects(daytona.create({ [field]: value, labels }, { timeout: 60 }), (err) => {
        assert.ok(err instanceof DaytonaBadRequestError, `got ${err?.name}: ${err?.message}`)
        assert.equal(err.statusCode, 400)
        assert.match(err.message, new RegExp(field))
        return true
      })
      assert.deepEqual(await listAll(daytona, { labels: { nonce: labels.nonce } }), [])
    })
  }
})
