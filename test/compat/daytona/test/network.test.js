// Network options: networkBlockAll, networkAllowList (IPv4 CIDRs, at most
// five) and domainAllowList map onto the sandbox's network policy, which
// the Sandbox reads back and updateNetworkSettings replaces at once. A
// sandbox keeps having network or not for its life. run.sh's daemon runs
// without --sandbox-network: every sandbox there has none, and asking for
// some is a 400 saying so; the cases that need network run only against a
// daemon that gives it (SANDBOXD_URL), and are skipped otherwise.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'

import { DaytonaBadRequestError } from '@daytonaio/sdk'

import { createSandbox, labelsFor, listAll, newClient } from './helpers.js'

const daytona = newClient()

/** Asserts that err is a 400 whose message matches re. */
function badRequest(re) {
  return (err) => {
    assert.ok(err instanceof DaytonaBadRequestError, `got ${err?.name}: ${err?.message}`)
    assert.equal(err.statusCode, 400)
    assert.match(err.message, re)
    return true
  }
}

describe('network', () => {
  // A sandbox with Daytona's default: it has network when the daemon gives it.
  let probe
  let daemonHasNetwork
  before(async () => {
    probe = await createSandbox(null, daytona, 'network-probe')
    daemonHasNetwork = probe.networkBlockAll === false
  })
  after(async () => {
    await probe?.delete(60).catch(() => {})
  })

  for (const [what, value, re] of [
    ['not a CIDR', '10.0.0.0/8,nonsense', /networkAllowList: "nonsense" is not an IPv4 CIDR/],
    ['a host name', 'example.com', /not an IPv4 CIDR/],
    ['more than five CIDRs', '1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8,6.0.0.0/8', /at most 5 CIDRs/],
  ]) {
    it(`a networkAllowList that is ${what} is a 400 saying so, and creates nothing`, { timeout: 60_000 }, async () => {
      const labels = labelsFor('network-bad-list')
      await assert.rejects(daytona.create({ networkAllowList: value, labels }, { timeout: 60 }), badRequest(re))
      assert.deepEqual(await listAll(daytona, { labels: { nonce: labels.nonce } }), [])
    })
  }

  it('networkBlockAll with an allow list is a 400', { timeout: 60_000 }, async () => {
    const labels = labelsFor('network-block-and-list')
    await assert.rejects(
      daytona.create({ networkBlockAll: true, domainAllowList: 'example.com', labels }, { timeout: 60 }),
      badRequest(/set one or the other/),
    )
    assert.deepEqual(await listAll(daytona, { labels: { nonce: labels.nonce } }), [])
  })

  it('networkBlockAll reads back; blocking again is a no-op, giving it network a 400', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'network-blocked', { networkBlockAll: true })
    assert.equal(sb.networkBlockAll, true)
    await sb.updateNetworkSettings({ networkBlockAll: true })
    assert.equal(sb.networkBlockAll, true)
    await assert.rejects(sb.updateNetworkSettings({ networkBlockAll: false }), badRequest(/created without network/))
    await assert.rejects(sb.updateNetworkSettings({ networkAllowList: 'nonsense' }), badRequest(/not an IPv4 CIDR/))
    assert.equal((await daytona.get(sb.id)).networkBlockAll, true)
  })

  it('without the daemon\'s network: every sandbox reads blocked, and an allow list is a 400 naming it', { timeout: 60_000 }, async (t) => {
    if (daemonHasNetwork) return t.skip('this daemon gives sandboxes network')
    assert.equal(probe.networkBlockAll, true)
    const labels = labelsFor('network-no-daemon-network')
    await assert.rejects(
      daytona.create({ networkAllowList: '10.0.0.0/8', labels }, { timeout: 60 }),
      badRequest(/networkAllowList: this daemon gives sandboxes no network \(it runs without --sandbox-network\)/),
    )
    await assert.rejects(
      daytona.create({ domainAllowList: 'example.com', labels }, { timeout: 60 }),
      badRequest(/domainAllowList: this daemon gives sandboxes no network/),
    )
    assert.deepEqual(await listAll(daytona, { labels: { nonce: labels.nonce } }), [])
  })

  it('with the daemon\'s network: the allow lists read back, and updateNetworkSettings replaces them', { timeout: 180_000 }, async (t) => {
    if (!daemonHasNetwork) return t.skip('this daemon gives sandboxes no network (run.sh starts it without --sandbox-network)')
    const sb = await createSandbox(t, daytona, 'network-lists', {
      networkAllowList: '192.0.2.0/24,198.51.100.7/32',
      domainAllowList: 'example.com,*.daytona.io',
    })
    assert.equal(sb.networkBlockAll, false)
    assert.equal(sb.networkAllowList, '192.0.2.0/24,198.51.100.7/32')
    assert.equal(sb.domainAllowList, '*.daytona.io,example.com')

    await sb.updateNetworkSettings({ networkAllowList: '203.0.113.0/24' })
    assert.equal(sb.networkAllowList, '203.0.113.0/24')
    assert.equal(sb.domainAllowList, '*.daytona.io,example.com', 'a list left out is kept')

    await sb.updateNetworkSettings({ networkBlockAll: true })
    assert.equal(sb.networkBlockAll, true)
    assert.equal(sb.networkAllowList, undefined)

    await sb.updateNetworkSettings({ networkBlockAll: false })
    const got = await daytona.get(sb.id)
    assert.equal(got.networkBlockAll, false)
    assert.equal(got.networkAllowList, undefined)
    assert.equal(got.domainAllowList, undefined)
  })
})
