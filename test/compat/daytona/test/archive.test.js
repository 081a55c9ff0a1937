// Archive and auto-archive: archive() stops the sandbox and keeps its
// filesystem (state archived), start() recovers it; the auto-archive
// interval is honoured at create and by setAutoArchiveInterval, and read back.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { createSandbox, newClient, nonce, sh } from './helpers.js'

const daytona = newClient()

describe('archive', () => {
  it('archive keeps the filesystem; start recovers it; intervals are reported', { timeout: 300_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'archive', { autoArchiveInterval: 90 })
    assert.equal(sb.autoArchiveInterval, 90)
    await sb.setAutoArchiveInterval(45)
    await sb.refreshData()
    assert.equal(sb.autoArchiveInterval, 45)
    assert.equal((await daytona.get(sb.id)).autoArchiveInterval, 45)

    const marker = `/home/daytona/archive-${nonce()}`
    await sh(sb, `echo kept > ${marker}`)
    await sb.stop(120)
    assert.equal(sb.state, 'stopped')
    await sb.archive()
    assert.equal(sb.state, 'archived')
    assert.equal((await daytona.get(sb.id)).state, 'archived')

    await sb.start(120)
    assert.equal(sb.state, 'started')
    assert.equal(await sh(sb, `cat ${marker}`), 'kept\n')
    await sb.stop(120)
    assert.equal((await daytona.get(sb.id)).state, 'stopped', 'a plain stop within the interval is not archived')
  })

  it('autoArchiveInterval 0 means the maximum (43200 minutes); more is capped, as Daytona does', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'archive-max', { autoArchiveInterval: 0 })
    assert.equal(sb.autoArchiveInterval, 43200)
    assert.equal((await daytona.get(sb.id)).autoArchiveInterval, 43200)
    await sb.setAutoArchiveInterval(100000)
    await sb.refreshData()
    assert.equal(sb.autoArchiveInterval, 43200)
    await sb.setAutoArchiveInterval(0)
    assert.equal((await daytona.get(sb.id)).autoArchiveInterval, 43200)
  })
})
