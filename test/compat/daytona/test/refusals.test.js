// What the facade does not do is refused, clearly, in Daytona's error shape:
// create fields it cannot honour are a 400 naming the field (never dropped);
// declarative images at create and named forks are refused with a message
// saying so (never a 404, which reads as "not found"). Network options:
// network.test.js.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { DaytonaBadRequestError, DaytonaError, DaytonaNotFoundError, Image } from '@daytonaio/sdk'

import { createSandbox, labelsFor, listAll, newClient } from './helpers.js'

/** Asserts that err is a refusal: not a 404, with a message matching re. */
function refused(re, status = 501) {
  return (err) => {
    assert.ok(err instanceof DaytonaError, `got ${err?.name}: ${err?.message}`)
    assert.ok(!(err instanceof DaytonaNotFoundError), `a 404: ${err.message}`)
    assert.equal(err.statusCode, status, err.message)
    assert.match(err.message, re)
    return true
  }
}

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

  it('a declarative image whose build fails is a 400 with its error, and creates nothing', { timeout: 120_000 }, async () => {
    const labels = labelsFor('refuse-image')
    const image = Image.base('sandboxd/base:bookworm').runCommands('echo failing on purpose; exit 5')
    await assert.rejects(daytona.create({ image, labels }, { timeout: 90 }), refused(/the build failed.*exit code 5/, 400))
    assert.deepEqual(await listAll(daytona, { labels: { nonce: labels.nonce } }), [])
  })

  it('a named fork is refused, not 404', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'refuse-sandbox-ops')
    await assert.rejects(sb.fork({ name: 'a-fork' }), refused(/name cannot be chosen/, 400))
    assert.equal((await daytona.get(sb.id)).state, 'started', 'the sandbox is untouched')
  })
})
