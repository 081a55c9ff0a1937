// What sandboxd does not implement answers in E2B's error shape, so the
// SDK's errors say what is missing instead of "404: [object Object]"; a
// sandbox that is not there answers envd traffic with E2B's edge body.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { Sandbox, SandboxError, SandboxNotFoundError, Template, Volume, VolumeError } from 'e2b'

import { createSandbox } from './helpers.js'

/** Asserts that promise rejects with a SandboxError whose message matches re. */
async function rejectsWith(promise, re) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxError || err instanceof VolumeError, `${err?.name}: ${err?.message}`)
    assert.doesNotMatch(err.message, /object Object/)
    assert.match(err.message, re)
    return true
  })
}

describe('errors', { concurrency: true }, () => {
  it('unimplemented APIs say what is missing', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'errors-unimplemented')
    await rejectsWith(Volume.list(), /^501: sandboxd does not implement the volumes API/)
    await rejectsWith(Template.getTags('some-template'), /^404: template "some-template": not found/)
    // Snapshots and fork of an unknown sandbox are "not found".
    await assert.rejects(Sandbox.createSnapshot('sb-00000000deadbeef'), SandboxNotFoundError)
    await assert.rejects(Sandbox.fork('sb-00000000deadbeef'), SandboxNotFoundError)
  })

  it('envd traffic to a sandbox that is gone gets E2B\'s edge body', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'errors-gone')
    await sbx.kill()
    assert.equal(await sbx.isRunning(), false)
    const res = await fetch(new URL('/health', process.env.E2B_SANDBOX_URL), {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' },
    })
    assert.equal(res.status, 502)
    assert.deepEqual(await res.json(), { sandboxId: sbx.sandboxId, message: 'The sandbox was not found', code: 502 })
    await assert.rejects(sbx.files.read('/etc/hostname'), (err) => {
      assert.match(err.message, /The sandbox was not found/)
      return true
    })
  })
})
