// Snapshots and forks: sandbox.createSnapshot, Sandbox.create(snapshotId),
// Sandbox.listSnapshots, Sandbox.deleteSnapshot and sandbox.fork. sandboxd
// captures the filesystem (Docker copies files, not memory): a fork or a
// sandbox made from a snapshot has the source's files, not its processes.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { describe, it } from 'node:test'

import { Sandbox } from 'e2b'

import { createSandbox, killQuietly } from './helpers.js'

/** Deletes a snapshot, ignoring every error (for cleanup paths). */
async function deleteQuietly(snapshotId) {
  try {
    await Sandbox.deleteSnapshot(snapshotId)
  } catch {
    // gone already, or still in use by a sandbox the sweep kills
  }
}

/** All pages of Sandbox.listSnapshots(opts). */
async function listAllSnapshots(opts) {
  const paginator = Sandbox.listSnapshots(opts)
  const items = []
  while (paginator.hasNext) {
    items.push(...(await paginator.nextItems()))
  }
  return items
}

// In the cluster pass (COMPAT_CLUSTER) a snapshot is made on its sandbox's
// node and listed, used and deleted through node 1: templates are the
// cluster's (docs/cluster.md). 300 s a case, as every other case that
// commits a sandbox in both suites: under --engine oci a commit is the
// whole file system (one layer, ~400 MB here), pushed through the registry
// and unpacked on each node that uses it, and gVisor's creates are slower.
// The calls that commit, push or unpack such a layer wait up to 240 s, not
// the SDK's 60 (pushes of 34-72 s and unpacks of 72-77 s were seen in the
// cluster pass on a loaded 2-core machine).
const SLOW = { requestTimeoutMs: 240_000 }

describe('snapshots and fork', { concurrency: true, timeout: 600_000 }, () => {
  it('snapshot: create from it, list it, delete it', { timeout: 300_000 }, async (t) => {
    const sbx = await createSandbox(t, 'snapshot')
    const content = `snapshot ${randomUUID()}`
    await sbx.files.write('/home/user/snap.txt', content)

    const snap = await sbx.createSnapshot(SLOW)
    t.after(() => deleteQuietly(snap.snapshotId))
    assert.ok(snap.snapshotId, 'a snapshot id')
    assert.deepEqual(snap.names, [])

    const fromSnap = await createSandbox(t, 'snapshot', { template: snap.snapshotId, ...SLOW })
    assert.equal(await fromSnap.files.read('/home/user/snap.txt'), content)
    const who = await fromSnap.commands.run('whoami')
    assert.equal(who.stdout.trim(), 'user', "the source's default user")
    assert.equal((await fromSnap.getInfo()).templateId, snap.snapshotId)
    await fromSnap.kill()

    const listed = await listAllSnapshots({ sandboxId: sbx.sandboxId })
    assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])
    assert.deepEqual(await listAllSnapshots({ sandboxId: `sb-${'0'.repeat(16)}` }), [])
    assert.ok((await sbx.listSnapshots().nextItems()).some((s) => s.snapshotId === snap.snapshotId), 'sandbox.listSnapshots lists it')

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'a second delete finds nothing')
    assert.deepEqual(await listAllSnapshots({ sandboxId: sbx.sandboxId }), [])
  })

  it('snapshot: named, and in use while a sandbox made from it lives', { timeout: 300_000 }, async (t) => {
    const sbx = await createSandbox(t, 'snapshot-named')
    const name = `snap-${randomUUID().slice(0, 8)}`
    const snap = await Sandbox.createSnapshot(sbx.sandboxId, { name, ...SLOW })
    t.after(() => deleteQuietly(snap.snapshotId))
    assert.deepEqual(snap.names, [name])
    assert.deepEqual((await listAllSnapshots({ name })).map((s) => s.snapshotId), [snap.snapshotId])

    const fromName = await createSandbox(t, 'snapshot-named', { template: name, ...SLOW })
    await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId), (err) => {
      assert.match(err.message, /^409: .*in use/)
      return true
    })
    await fromName.kill()
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  })

  it('fork: two running sandboxes with the source\'s files, independent', { timeout: 300_000 }, async (t) => {
    const sbx = await createSandbox(t, 'fork')
    const content = `fork ${randomUUID()}`
    await sbx.files.write('/home/user/fork.txt', content)

    // One request commits the source and starts both forks: past the SDK's
    // 60 s default on a busy machine under --engine oci (whole-file-system
    // commits, see above), which the first oci run did in 32 s and a later
    // one did not.
    const forks = await sbx.fork({ count: 2, timeoutMs: 120_000, requestTimeoutMs: 240_000 })
    for (const f of forks) {
      if (!(f instanceof Error)) t.after(() => killQuietly(f.sandboxId))
    }
    assert.equal(forks.length, 2)
    for (const f of forks) {
      assert.ok(!(f instanceof Error), `a fork failed: ${f?.message}`)
      assert.notEqual(f.sandboxId, sbx.sandboxId)
    }
    assert.notEqual(forks[0].sandboxId, forks[1].sandboxId)
    for (const f of forks) {
      assert.equal(await f.isRunning(), true)
      assert.equal(await f.files.read('/home/user/fork.txt'), content)
    }

    await forks[0].files.write('/home/user/fork.txt', 'changed')
    assert.equal(await forks[0].files.read('/home/user/fork.txt'), 'changed')
    assert.equal(await forks[1].files.read('/home/user/fork.txt'), content, 'the other fork keeps its own copy')
    assert.equal(await sbx.files.read('/home/user/fork.txt'), content, 'the source keeps its own copy')
    assert.equal(await sbx.isRunning(), true, 'the source keeps running')
  })
})
