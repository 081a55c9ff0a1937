// What E2B's base template offers and code written for E2B relies on.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { Sandbox, SandboxError } from 'e2b'

import { RUN_ID, listAll, metadataFor, createSandbox } from './helpers.js'

describe('base template', { concurrency: true }, () => {
  it('user has passwordless sudo, quietly', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'base-sudo')
    const res = await sbx.commands.run('whoami && sudo -n whoami && sudo -n apt-get --version >/dev/null && echo apt-ok')
    assert.equal(res.stdout, 'user\nroot\napt-ok\n')
    assert.equal(res.stderr, '')
    // E2B's scoped-env pattern: sudo keeps what is passed on its command line.
    const env = await sbx.commands.run('sudo -n env SCOPED=yes sh -c \'echo "$SCOPED $(id -u)"\'', { envs: { OUTER: 'x' } })
    assert.equal(env.stdout, 'yes 0\n')
  })

  it('create with mcp fails as the SDK reports a gateway that cannot start, leaving nothing', { timeout: 120_000 }, async () => {
    await assert.rejects(
      Sandbox.create({ mcp: { exa: { apiKey: 'not-used' } }, metadata: metadataFor('base-mcp') }),
      (err) => {
        assert.ok(err instanceof SandboxError, `${err?.name}: ${err?.message}`)
        assert.match(err.message, /^Failed to start MCP gateway: sandboxd: the MCP gateway is not available/)
        return true
      },
    )
    // The SDK killed the sandbox it made.
    assert.deepEqual(await listAll({ query: { metadata: { run: RUN_ID, test: 'base-mcp' } } }), [])
  })
})
