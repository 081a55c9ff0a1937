// Volumes (/volumes): create, get (by name, with create), list, a sandbox
// created with volumes [{volumeId, mountPath}] writing data another sandbox
// reads, deleting a volume in use refused with DaytonaConflictError, and
// delete.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { DaytonaConflictError, DaytonaNotFoundError } from '@daytonaio/sdk'

import { createSandbox, deleteQuietly, newClient, nonce } from './helpers.js'

const daytona = newClient()

describe('volumes', () => {
  it('creates, lists, mounts, refuses deleting in use, and deletes', { timeout: 240_000 }, async (t) => {
    const name = `vol-${nonce()}`
    const vol = await daytona.volume.create(name)
    t.after(async () => {
      try { await daytona.volume.delete(vol) } catch { /* deleted by the test */ }
    })
    assert.equal(vol.name, name)
    assert.equal(vol.state, 'ready')
    assert.equal((await daytona.volume.get(name)).id, vol.id)
    assert.ok((await daytona.volume.list()).some((v) => v.id === vol.id), `${name} is listed`)
    await assert.rejects(daytona.volume.get(`missing-${nonce()}`), DaytonaNotFoundError)
    const made = await daytona.volume.get(`made-${nonce()}`, true)
    assert.equal(made.state, 'ready')
    await daytona.volume.delete(made)

    const mountPath = '/home/user/shared'
    const a = await createSandbox(t, daytona, 'volumes-a', { volumes: [{ volumeId: vol.id, mountPath }] })
    assert.deepEqual(a.volumes, [{ volumeId: vol.id, mountPath }])
    const w = await a.process.executeCommand(`echo from-a > ${mountPath}/note.txt`)
    assert.equal(w.exitCode, 0, w.result)
    const b = await createSandbox(t, daytona, 'volumes-b', { volumes: [{ volumeId: vol.id, mountPath: '/mnt/v' }] })
    assert.equal((await b.process.executeCommand('cat /mnt/v/note.txt')).result, 'from-a\n')

    await assert.rejects(daytona.volume.delete(vol), DaytonaConflictError)
    await deleteQuietly(a)
    await deleteQuietly(b)
    await daytona.volume.delete(vol)
    await assert.rejects(daytona.volume.get(name), DaytonaNotFoundError)
  })

  it('a sandbox with an unknown volume is refused', { timeout: 60_000 }, async () => {
    await assert.rejects(
      daytona.create({ volumes: [{ volumeId: `nope-${nonce()}`, mountPath: '/data' }] }),
      DaytonaNotFoundError,
    )
  })
})
