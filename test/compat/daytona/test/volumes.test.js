// Volumes (/volumes): create, get (by name, with create), list, a sandbox
// created with volumes [{volumeId, mountPath}] writing data another sandbox
// reads, deleting a volume in use refused with DaytonaConflictError, and
// delete; a sandbox mounting a subpath of a volume ({volumeId, mountPath,
// subpath}) sees only that directory, and bad or linked subpaths are refused.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { DaytonaConflictError, DaytonaError, DaytonaNotFoundError } from '@daytonaio/sdk'

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

  it('mounts a subpath: only that directory, written through it into the volume', { timeout: 240_000 }, async (t) => {
    const vol = await daytona.volume.create(`vsub-${nonce()}`)
    t.after(async () => {
      try { await daytona.volume.delete(vol) } catch { /* deleted by the test */ }
    })
    const whole = await createSandbox(t, daytona, 'volumes-whole', { volumes: [{ volumeId: vol.id, mountPath: '/mnt/v' }] })
    assert.equal((await whole.process.executeCommand('echo top > /mnt/v/top.txt')).exitCode, 0)
    // users/alice does not exist yet: the daemon makes it, writable by the
    // sandbox's unprivileged user.
    const part = await createSandbox(t, daytona, 'volumes-subpath', {
      volumes: [{ volumeId: vol.id, mountPath: '/mnt/part', subpath: 'users/alice' }],
    })
    assert.deepEqual(part.volumes, [{ volumeId: vol.id, mountPath: '/mnt/part', subpath: 'users/alice' }])
    // find -printf, not stat or ls: gVisor's statx (Debian's runsc 20221219)
    // refuses AT_NO_AUTOMOUNT, which coreutils 9 always passes (EINVAL).
    const w = await part.process.executeCommand("echo via-subpath > /mnt/part/note.txt && find /mnt/part -mindepth 1 -maxdepth 1 -printf '%f\\n'")
    assert.equal(w.exitCode, 0, w.result)
    assert.equal(w.result, 'note.txt\n', 'the subpath shows only its own directory')
    assert.equal((await whole.process.executeCommand('cat /mnt/v/users/alice/note.txt')).result, 'via-subpath\n')
    assert.equal((await part.fs.downloadFile('/mnt/part/note.txt')).toString(), 'via-subpath\n')

    for (const subpath of ['../escape', '/etc', 'a//b']) {
      await assert.rejects(
        daytona.create({ volumes: [{ volumeId: vol.id, mountPath: '/data', subpath }] }),
        (err) => err instanceof DaytonaError && !(err instanceof DaytonaNotFoundError),
        `subpath ${subpath} is refused`,
      )
    }
    // A link planted by the whole-volume sandbox is refused, never followed.
    assert.equal((await whole.process.executeCommand('ln -s /etc /mnt/v/etc-link')).exitCode, 0)
    await assert.rejects(
      daytona.create({ volumes: [{ volumeId: vol.id, mountPath: '/data', subpath: 'etc-link' }] }),
      DaytonaError,
    )
    await deleteQuietly(part)
    await deleteQuietly(whole)
  })

  it('a sandbox with an unknown volume is refused', { timeout: 60_000 }, async () => {
    await assert.rejects(
      daytona.create({ volumes: [{ volumeId: `nope-${nonce()}`, mountPath: '/data' }] }),
      DaytonaNotFoundError,
    )
  })
})
