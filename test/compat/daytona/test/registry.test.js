// Images from registries: Image.base(ref) of an image the host lacks, in
// the loopback registry run.sh starts (COMPAT_REGISTRY_IMAGE,
// test/compat/daemon.sh): snapshot.create pulls it and builds, and a
// sandbox from the snapshot runs; an image the registry lacks is a 404.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { DaytonaNotFoundError, Image } from '@daytonaio/sdk'

import { createSandbox, newClient, nonce, sh } from './helpers.js'

const IMAGE = process.env.COMPAT_REGISTRY_IMAGE
const REGISTRY = process.env.COMPAT_REGISTRY
const daytona = newClient()

async function deleteSnapshotQuietly(name) {
  try {
    await daytona.snapshot.delete(await daytona.snapshot.get(name))
  } catch {
    // gone already
  }
}

const skip = !IMAGE && 'no loopback registry (docker-registry is not installed)'

describe('images from a registry', { skip }, () => {
  it('snapshot.create with Image.base(<registry image>) pulls it; a sandbox from it runs', { timeout: 300_000 }, async (t) => {
    const name = `pulled-${nonce()}`
    t.after(() => deleteSnapshotQuietly(name))
    const image = Image.base(IMAGE).runCommands('echo pulled > /marker')
    const snap = await daytona.snapshot.create({ name, image }, { timeout: 240 })
    assert.equal(snap.state, 'active')
    const sb = await createSandbox(t, daytona, 'registry-image-base', { snapshot: name })
    assert.equal(await sh(sb, 'cat /marker'), 'pulled\n')
  })

  it('Image.base of an image the registry lacks is a 404 naming it', { timeout: 120_000 }, async () => {
    const ref = `${REGISTRY}/compat/nothing:here`
    await assert.rejects(daytona.snapshot.create({ name: `missing-${nonce()}`, image: Image.base(ref) }), (err) => {
      assert.ok(err instanceof DaytonaNotFoundError, `got ${err?.name}: ${err?.message}`)
      assert.match(err.message, /not found in its registry/)
      return true
    })
  })
})
