// Egress settings through the SDK. The daemon run.sh starts has no
// --sandbox-network, so every sandbox has no network whatever it asks;
// what the SDK can see of that: getInfo tells the truth, a bad CIDR is the
// server's 400 (the SDK checks none itself: it sends allowOut and denyOut
// as given), and updateNetwork takes only "deny everything".
// internal/api/e2b's tests check the policies themselves, with network.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { ALL_TRAFFIC, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'

import { createSandbox, metadataFor } from './helpers.js'

describe('network', { concurrency: true }, () => {
  it('allowInternetAccess: false creates a sandbox without network, and getInfo says so', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'network-off', { allowInternetAccess: false })
    const info = await sbx.getInfo()
    assert.equal(info.allowInternetAccess, false)
    assert.deepEqual(info.network?.denyOut, [ALL_TRAFFIC])
    const r = await sbx.commands.run('curl -sS -m 2 http://1.1.1.1/ || echo unreachable')
    assert.match(r.stdout, /unreachable/)
    // Denying everything is what holds already; anything more cannot be.
    await sbx.updateNetwork({ allowInternetAccess: false })
    await sbx.updateNetwork({ denyOut: ({ allTraffic }) => [allTraffic] })
    await assert.rejects(sbx.updateNetwork({ allowOut: ['1.1.1.1'], denyOut: [ALL_TRAFFIC] }), (err) => {
      assert.ok(err instanceof SandboxError, `${err?.name}: ${err?.message}`)
      assert.match(err.message, /^400: .*--sandbox-network/)
      return true
    })
    await assert.rejects(Sandbox.updateNetwork('sb-00000000deadbeef', { allowOut: [] }), SandboxNotFoundError)
  })

  it('a bad CIDR is a 400 naming it, and makes no sandbox', { timeout: 120_000 }, async () => {
    const metadata = metadataFor('network-bad-cidr')
    for (const [network, re] of [
      [{ denyOut: ['10.0.0.0/33'] }, /^400: network\.denyOut: .*10\.0\.0\.0\/33/],
      [{ denyOut: ['example.com'] }, /^400: network\.denyOut: .*domain names are not supported/],
      [{ allowOut: ['example.com'] }, /^400: .*ALL_TRAFFIC/],
      [{ allowOut: ['not a host'], denyOut: [ALL_TRAFFIC] }, /^400: network\.allowOut: .*not a host/],
    ]) {
      await assert.rejects(Sandbox.create('base', { metadata, network }), (err) => {
        assert.ok(err instanceof SandboxError, `${err?.name}: ${err?.message}`)
        assert.equal(err.statusCode, 400)
        assert.match(err.message, re)
        return true
      })
    }
    const left = await Sandbox.list({ query: { metadata: { nonce: metadata.nonce } } }).nextItems()
    assert.deepEqual(left, [])
  })
})
