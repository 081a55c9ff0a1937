// Images from registries: Template.build().fromImage(ref) of an image the
// host lacks, in the loopback registry run.sh starts (COMPAT_REGISTRY_IMAGE,
// test/compat/daemon.sh): the daemon pulls it, the build and a sandbox from
// the template work; an image the registry lacks is a clear error.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { describe, it } from 'node:test'

import { Template } from 'e2b'

import { createSandbox } from './helpers.js'

const IMAGE = process.env.COMPAT_REGISTRY_IMAGE
const REGISTRY = process.env.COMPAT_REGISTRY

function templateName(what) {
  return `compat-${what}-${randomUUID().slice(0, 8)}`
}

async function deleteQuietly(name) {
  try {
    await fetch(`${process.env.E2B_API_URL}/templates/${encodeURIComponent(name)}`, {
      method: 'DELETE',
      headers: { 'X-API-KEY': process.env.E2B_API_KEY },
    })
  } catch {
    // gone already
  }
}

const skip = !IMAGE && 'no loopback registry (docker-registry is not installed)'

describe('images from a registry', { timeout: 300_000, skip }, () => {
  it('Template.build().fromImage(<registry image>) pulls it; a sandbox from the template runs', { timeout: 240_000 }, async (t) => {
    const name = templateName('pulled')
    t.after(() => deleteQuietly(name))
    // The build commits and, in the cluster pass, pushes the whole file
    // system under --engine oci (snapshots.test.js says why 240 s).
    await Template.build(Template().fromImage(IMAGE).runCmd('echo pulled > /marker'), name, { requestTimeoutMs: 200_000 })
    const sbx = await createSandbox(t, 'registry-fromimage', { template: name, requestTimeoutMs: 200_000 })
    assert.equal((await sbx.commands.run('cat /marker')).stdout.trim(), 'pulled')
  })

  it('an image the registry lacks is a clear error', { timeout: 120_000 }, async () => {
    await assert.rejects(
      Template.build(Template().fromImage(`${REGISTRY}/compat/nothing:here`), templateName('missing')),
      (err) => /not found in its registry/.test(err.message),
    )
  })
})
