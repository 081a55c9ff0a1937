// Snapshots, forks and image builds: sandbox.createSnapshot(name) captures
// the sandbox's files and daytona.create({snapshot: name}) sees them;
// snapshot.list/get/delete (deleting one in use is DaytonaConflictError);
// sandbox.fork() is a new started sandbox with the files, independent of
// its source; snapshot.create with a Dockerfile-only Image streams its
// build logs, turns active, and a sandbox from it has what the RUN wrote
// and the ENV; a line sandboxd does not build is a 400.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { DaytonaBadRequestError, DaytonaConflictError, DaytonaNotFoundError, Image } from '@daytonaio/sdk'

import { createSandbox, deleteQuietly, newClient, nonce, sh } from './helpers.js'

const BASE = 'sandboxd/base:bookworm'
const daytona = newClient()

async function deleteSnapshotQuietly(name) {
  try {
    await daytona.snapshot.delete(await daytona.snapshot.get(name))
  } catch {
    // gone already
  }
}

// In the cluster pass (COMPAT_CLUSTER) a snapshot is made on its sandbox's
// node and listed, used and deleted through node 1: templates are the
// cluster's (docs/cluster.md).
describe('snapshots', () => {
  it('createSnapshot, create from it, list/get, delete in use refused, delete', { timeout: 300_000 }, async (t) => {
    const src = await createSandbox(t, daytona, 'snapshot-source')
    await src.fs.uploadFile(Buffer.from('captured\n'), '/home/daytona/snap.txt')
    const name = `snap-${nonce()}`
    t.after(() => deleteSnapshotQuietly(name))
    // 240 s, not the SDK's 60: in the cluster pass the snapshot is pushed
    // to the cluster's registry before the call answers, and under
    // --engine oci a commit is the whole file system (one layer, ~400 MB:
    // pushes of 30-63 s seen on this busy 2-core machine), as the E2B
    // suite's snapshot cases say.
    await src.createSnapshot(name, 240)
    assert.equal(src.state, 'started', 'the source runs on')

    const snap = await daytona.snapshot.get(name)
    assert.equal(snap.name, name)
    assert.equal(snap.state, 'active')
    assert.equal(snap.sourceSandboxId, src.id)
    assert.equal((await daytona.snapshot.get(snap.id)).name, name, 'get by id')
    const page = await daytona.snapshot.list()
    assert.ok(page.items.some((s) => s.name === name), `${name} is listed`)
    assert.ok(page.items.some((s) => s.name === 'base'), 'the default snapshot is listed')

    const from = await createSandbox(t, daytona, 'snapshot-from', { snapshot: name })
    assert.equal(await sh(from, 'cat /home/daytona/snap.txt'), 'captured\n')
    await assert.rejects(daytona.snapshot.delete(snap), DaytonaConflictError)
    await deleteQuietly(from)
    await daytona.snapshot.delete(snap)
    await assert.rejects(daytona.snapshot.get(name), DaytonaNotFoundError)
  })

  it('fork is a started sandbox with the files, independent of its source', { timeout: 300_000 }, async (t) => {
    const src = await createSandbox(t, daytona, 'fork-source')
    await sh(src, 'echo before > /home/daytona/f.txt')
    const fork = await src.fork()
    t.after(() => deleteQuietly(fork))
    assert.notEqual(fork.id, src.id)
    assert.equal(fork.state, 'started')
    assert.equal(await sh(fork, 'cat /home/daytona/f.txt'), 'before\n')
    await sh(fork, 'echo fork > /home/daytona/f.txt')
    assert.equal(await sh(src, 'cat /home/daytona/f.txt'), 'before\n', 'the fork writes its own copy')
  })

  it('snapshot.create builds a Dockerfile-only Image with logs; a sandbox from it has its files and env', { timeout: 300_000 }, async (t) => {
    const name = `built-${nonce()}`
    t.after(() => deleteSnapshotQuietly(name))
    const image = Image.base(BASE).runCommands('echo hi > /built').env({ A: 'b', SP: 'x y' })
    const logs = []
    const snap = await daytona.snapshot.create({ name, image }, { onLogs: (line) => logs.push(line), timeout: 240 })
    assert.equal(snap.state, 'active')
    assert.match(logs.join('\n'), /echo hi > \/built/)
    const sb = await createSandbox(t, daytona, 'snapshot-built', { snapshot: name })
    assert.equal(await sh(sb, 'cat /built; echo "$A|$SP"'), 'hi\nb|x y\n')
  })

  it('create({image}) builds a declarative Image first, and the sandbox has what it built', { timeout: 300_000 }, async (t) => {
    const mark = nonce()
    const image = Image.base(BASE).runCommands(`echo ${mark} > /built`).env({ BUILT: mark }).workdir('/srv')
    for (const test of ['create-image', 'create-image-again']) {
      const sb = await createSandbox(t, daytona, test, { image }, 240)
      assert.equal(sb.state, 'started')
      assert.equal(await sh(sb, 'cat /built; echo "$BUILT"; test -d /srv && echo workdir made'), `${mark}\n${mark}\nworkdir made\n`)
    }
  })

  it('a Dockerfile line sandboxd does not build is a 400 naming it', { timeout: 60_000 }, async () => {
    const image = Image.base(BASE).cmd(['sleep', '1'])
    await assert.rejects(daytona.snapshot.create({ name: `bad-${nonce()}`, image }), (err) => {
      assert.ok(err instanceof DaytonaBadRequestError, `got ${err?.name}: ${err?.message}`)
      assert.match(err.message, /CMD is not supported/)
      return true
    })
  })
})
