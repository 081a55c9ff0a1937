// Sandbox lifecycle through the control plane (/daytona/api/sandbox...):
// create (default, and named with env and labels), get by name and id, list
// with a label filter and pagination, a duplicate name, stop and start, delete.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { Daytona, DaytonaAuthenticationError, DaytonaConflictError, DaytonaNotFoundError } from '@daytonaio/sdk'

import {
  API_URL,
  RUN_ID,
  SUITE,
  createSandbox,
  isGone,
  labelsFor,
  listAll,
  newClient,
  nonce,
  sh,
  waitFor,
} from './helpers.js'

const daytona = newClient()

/** The fields the SDK's Sandbox type requires, with their types. */
function assertSandboxShape(sb) {
  for (const field of ['id', 'organizationId', 'name', 'user', 'target', 'toolboxProxyUrl']) {
    assert.equal(typeof sb[field], 'string', `sandbox.${field} is ${typeof sb[field]}`)
  }
  assert.match(sb.id, /\S/)
  assert.match(sb.name, /\S/, 'a sandbox created without a name still has one (Daytona uses the id)')
  for (const field of ['cpu', 'gpu', 'memory', 'disk']) {
    assert.equal(typeof sb[field], 'number', `sandbox.${field} is ${typeof sb[field]}`)
  }
  assert.equal(typeof sb.public, 'boolean')
  assert.equal(typeof sb.networkBlockAll, 'boolean')
  assert.equal(typeof sb.labels, 'object')
  assert.equal(typeof sb.env, 'object')
  // The toolbox is served by the same daemon; the SDK appends /<id>/... to this URL.
  assert.equal(new URL(sb.toolboxProxyUrl).origin, new URL(API_URL).origin)
}

describe('lifecycle', () => {
  it('creates a default sandbox that is started and runs commands', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'create-default')
    assertSandboxShape(sb)
    assert.equal(sb.state, 'started')
    // The SDK always sends this label; codeRun depends on it coming back.
    assert.equal(sb.labels['code-toolbox-language'], 'python')
    assert.equal(sb.labels.run, RUN_ID)
    assert.equal(await sh(sb, 'echo ready'), 'ready\n')
    // The default image: Debian bookworm with python3 and git.
    const osRelease = await sh(sb, '. /etc/os-release && echo "$ID $VERSION_CODENAME"')
    assert.equal(osRelease, 'debian bookworm\n')
    await sh(sb, 'command -v python3 && command -v git')
  })

  it('creates a named sandbox with env and labels; get finds it by name and by id', { timeout: 180_000 }, async (t) => {
    const name = `dt-compat-${nonce(10)}`
    const sb = await createSandbox(t, daytona, 'create-named', {
      name,
      envVars: { GREETING: 'hello daytona', SECOND_VAR: 'two words' },
      labels: { team: 'compat', purpose: 'named' },
    })
    assertSandboxShape(sb)
    assert.equal(sb.name, name)
    assert.equal(sb.state, 'started')
    assert.equal(sb.env.GREETING, 'hello daytona')
    assert.equal(sb.labels.team, 'compat')
    assert.equal(sb.labels.purpose, 'named')
    assert.equal(sb.labels.suite, SUITE)
    assert.equal(sb.labels['code-toolbox-language'], 'python')

    const res = await sb.process.executeCommand('echo "$GREETING/$SECOND_VAR"')
    assert.equal(res.exitCode, 0)
    assert.equal(res.result, 'hello daytona/two words\n')

    const byName = await daytona.get(name)
    assertSandboxShape(byName)
    assert.equal(byName.id, sb.id)
    assert.equal(byName.name, name)
    assert.equal(byName.state, 'started')
    assert.equal(byName.labels.team, 'compat')
    assert.equal(byName.labels['code-toolbox-language'], 'python')
    assert.equal(byName.env.GREETING, 'hello daytona')
    // A sandbox obtained with get() drives the same toolbox.
    assert.equal((await byName.process.executeCommand('echo "$GREETING"')).result, 'hello daytona\n')

    const byId = await daytona.get(sb.id)
    assert.equal(byId.id, sb.id)
    assert.equal(byId.name, name)
  })

  it('get of an unknown sandbox throws DaytonaNotFoundError', { timeout: 30_000 }, async () => {
    await assert.rejects(daytona.get(`dt-missing-${nonce()}`), (err) => {
      assert.ok(err instanceof DaytonaNotFoundError, `got ${err?.name}: ${err?.message}`)
      assert.equal(err.statusCode, 404)
      assert.match(err.message, /\S/)
      return true
    })
  })

  it('lists by label filter, across pages', { timeout: 180_000 }, async (t) => {
    const group = `list-${nonce()}`
    const [a, b] = await Promise.all([
      createSandbox(t, daytona, 'list', { labels: { group, member: 'a' } }),
      createSandbox(t, daytona, 'list', { labels: { group, member: 'b' } }),
    ])
    // An unrelated sandbox of this run, which the filter must leave out.
    const other = await createSandbox(t, daytona, 'list', { labels: { group: `${group}-other` } })

    const found = await listAll(daytona, { labels: { run: RUN_ID, group } })
    assert.deepEqual(found.map((s) => s.id).sort(), [a.id, b.id].sort())
    for (const s of found) {
      assert.equal(s.labels.group, group)
      assert.equal(s.state, 'started')
      assert.equal(typeof s.toolboxProxyUrl, 'string')
    }
    // Two labels must both match.
    const onlyA = await listAll(daytona, { labels: { group, member: 'a' } })
    assert.deepEqual(onlyA.map((s) => s.id), [a.id])

    // One per page: the SDK follows nextCursor until it is null.
    const paged = await listAll(daytona, { labels: { group }, limit: 1 })
    assert.deepEqual(paged.map((s) => s.id).sort(), [a.id, b.id].sort())
    assert.ok(!paged.some((s) => s.id === other.id))

    // A sandbox from list() drives the toolbox like any other.
    assert.equal((await paged[0].process.executeCommand('echo listed')).result, 'listed\n')
  })

  it('a duplicate name is refused with DaytonaConflictError and creates nothing', { timeout: 180_000 }, async (t) => {
    const name = `dt-dup-${nonce(10)}`
    const first = await createSandbox(t, daytona, 'duplicate', { name })
    const secondLabels = labelsFor('duplicate-second')
    await assert.rejects(daytona.create({ name, labels: secondLabels }, { timeout: 120 }), (err) => {
      assert.ok(err instanceof DaytonaConflictError, `got ${err?.name}: ${err?.message}`)
      assert.equal(err.statusCode, 409)
      assert.match(err.message, /\S/)
      return true
    })
    // The refused create left nothing behind, and the first one is untouched.
    assert.deepEqual(await listAll(daytona, { labels: { nonce: secondLabels.nonce } }), [])
    const still = await daytona.get(name)
    assert.equal(still.id, first.id)
    assert.equal(still.state, 'started')
  })

  it('stop and start keep the filesystem; states are stopped and started', { timeout: 300_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'stop-start', { envVars: { KEEP: 'env survives' } })
    const marker = `/tmp/stop-start-${nonce()}`
    await sh(sb, `echo persisted > ${marker}`)

    await sb.stop(120)
    assert.equal(sb.state, 'stopped')
    assert.equal((await daytona.get(sb.id)).state, 'stopped')

    await sb.start(120)
    assert.equal(sb.state, 'started')
    assert.equal((await daytona.get(sb.id)).state, 'started')
    assert.equal(await sh(sb, `cat ${marker}`), 'persisted\n')
    assert.equal(await sh(sb, 'echo "$KEEP"'), 'env survives\n')

    // The Daytona-level helpers take the same paths.
    await daytona.stop(sb)
    assert.equal(sb.state, 'stopped')
    await daytona.start(sb, 120)
    assert.equal(sb.state, 'started')
    assert.equal(await sh(sb, `cat ${marker}`), 'persisted\n')
  })

  it('delete removes the sandbox: get says not found, list leaves it out', { timeout: 180_000 }, async (t) => {
    const name = `dt-del-${nonce(10)}`
    const sb = await createSandbox(t, daytona, 'delete', { name })
    const label = sb.labels.nonce
    await daytona.delete(sb)
    await waitFor(() => isGone(daytona, sb.id), { timeoutMs: 60_000, what: `${sb.id} to be gone` })
    await waitFor(() => isGone(daytona, name), { timeoutMs: 10_000, what: `${name} to be gone` })
    const listed = await listAll(daytona, { labels: { nonce: label } })
    assert.deepEqual(listed.map((s) => `${s.id} ${s.state}`), [])
    // The name is free again.
    const again = await createSandbox(t, daytona, 'delete-reuse', { name })
    assert.equal(again.name, name)
    assert.notEqual(again.id, sb.id)
  })

  it('a wrong API key is refused with DaytonaAuthenticationError (401)', { timeout: 30_000 }, async () => {
    const bad = new Daytona({ apiKey: 'not-a-sandboxd-token', apiUrl: API_URL, useDeprecatedPolling: true })
    try {
      await assert.rejects(bad.get(`dt-any-${nonce()}`), (err) => {
        assert.ok(err instanceof DaytonaAuthenticationError, `got ${err?.name}: ${err?.message}`)
        assert.equal(err.statusCode, 401)
        return true
      })
    } finally {
      await bad[Symbol.asyncDispose]()
    }
  })
})
