// Sandbox lifecycle through the control-plane API: create, getInfo, list,
// setTimeout, expiry, pause and connect, kill.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { Sandbox, SandboxNotFoundError } from 'e2b'

import { BASE, RUN_ID, createSandbox, listAll, requestAs, waitFor } from './helpers.js'

/** True once the sandbox is gone for the API: getInfo says not found. */
async function isGone(sandboxId) {
  try {
    await Sandbox.getInfo(sandboxId)
    return false
  } catch (err) {
    if (err instanceof SandboxNotFoundError) return true
    throw err
  }
}

describe('lifecycle', { concurrency: true }, () => {
  it('creates with metadata and envs', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'create-metadata-envs', {
      metadata: { team: 'compat', purpose: 'metadata and envs' },
      envs: { SANDBOX_GREETING: 'hello from create', SECOND_VAR: '2' },
    })
    assert.match(sbx.sandboxId, /\S/)

    const info = await sbx.getInfo()
    assert.equal(info.metadata.team, 'compat')
    assert.equal(info.metadata.purpose, 'metadata and envs')
    assert.equal(info.metadata.run, RUN_ID)

    const res = await sbx.commands.run('echo "$SANDBOX_GREETING/$SECOND_VAR"')
    assert.equal(res.stdout, 'hello from create/2\n')
  })

  it('getInfo describes a running sandbox; setTimeout moves its end', { timeout: 120_000 }, async (t) => {
    const before = Date.now()
    const sbx = await createSandbox(t, 'get-info', { timeoutMs: 120_000 })
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, BASE)
    assert.equal(info.state, 'running')
    assert.ok(info.startedAt instanceof Date && !Number.isNaN(info.startedAt.getTime()))
    assert.ok(info.startedAt.getTime() > before - 60_000, `startedAt ${info.startedAt.toISOString()} is stale`)
    // endAt = start + 120 s, give or take clock skew and create time
    const endIn = info.endAt.getTime() - Date.now()
    assert.ok(endIn > 60_000 && endIn <= 125_000, `endAt is ${endIn} ms away, want about 120 s`)
    assert.equal(typeof info.envdVersion, 'string')
    assert.equal(await sbx.isRunning(), true)

    await sbx.setTimeout(600_000)
    const extended = await sbx.getInfo()
    const extendedIn = extended.endAt.getTime() - Date.now()
    assert.ok(extendedIn > 540_000 && extendedIn <= 605_000, `endAt is ${extendedIn} ms away, want about 600 s`)
  })

  it('a sandbox created with a short timeout is gone after it', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'expiry-create', { timeoutMs: 5_000 })
    await waitFor(() => isGone(sbx.sandboxId), { timeoutMs: 60_000, intervalMs: 500, what: 'the sandbox to expire' })
    const listed = await listAll({ query: { metadata: { run: RUN_ID, test: 'expiry-create' } } })
    assert.deepEqual(listed.map((s) => s.sandboxId), [])
    assert.equal(await sbx.isRunning(), false) // envd traffic to a dead sandbox: 502
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  })

  it('setTimeout shortens the life of a sandbox', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'expiry-set-timeout')
    await sbx.setTimeout(3_000)
    await waitFor(() => isGone(sbx.sandboxId), { timeoutMs: 60_000, intervalMs: 500, what: 'the sandbox to expire' })
  })

  it('list filters on metadata', { timeout: 120_000 }, async (t) => {
    const [a, b] = await Promise.all([
      createSandbox(t, 'list-filter', { metadata: { group: 'a' } }),
      createSandbox(t, 'list-filter', { metadata: { group: 'b' } }),
    ])
    const onlyA = await listAll({ query: { metadata: { run: RUN_ID, test: 'list-filter', group: 'a' } } })
    assert.deepEqual(onlyA.map((s) => s.sandboxId), [a.sandboxId])
    const [listed] = onlyA
    assert.equal(listed.templateId, BASE)
    assert.equal(listed.state, 'running')
    assert.equal(listed.metadata.group, 'a')

    const both = await listAll({ query: { metadata: { run: RUN_ID, test: 'list-filter' } } })
    assert.deepEqual(both.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())

    // values with characters that need escaping survive the double encoding of the query
    const odd = await createSandbox(t, 'list-filter', { metadata: { group: 'a&b=c d/é' } })
    const onlyOdd = await listAll({ query: { metadata: { run: RUN_ID, group: 'a&b=c d/é' } } })
    assert.deepEqual(onlyOdd.map((s) => s.sandboxId), [odd.sandboxId])
  })

  it('pause, then connect resumes it', { timeout: 240_000 }, async (t) => {
    const sbx = await createSandbox(t, 'pause-connect')
    await sbx.files.write('/tmp/kept-across-pause', 'still here')

    assert.equal(await sbx.pause(), true)
    const paused = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(paused.state, 'paused')
    const listed = await listAll({ query: { metadata: { run: RUN_ID, test: 'pause-connect' }, state: ['paused'] } })
    assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
    assert.equal(await sbx.pause(), false, 'pausing a paused sandbox answers 409: false')

    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal(resumed.sandboxId, sbx.sandboxId)
    assert.equal((await resumed.getInfo()).state, 'running')
    const res = await resumed.commands.run('cat /tmp/kept-across-pause && echo " and running"')
    assert.equal(res.stdout, 'still here and running\n')

    // connect to a running sandbox is fine too, and the old handle works again
    await sbx.connect()
    assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
  })

  it('autoResume: the first command to a paused sandbox resumes it, with its files and processes', { timeout: 240_000 }, async (t) => {
    const sbx = await createSandbox(t, 'auto-resume', { lifecycle: { onTimeout: 'pause', autoResume: true } })
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
    await sbx.files.write('/tmp/kept-across-pause', 'still here')
    const sleeper = await sbx.commands.run('sleep 1000', { background: true })

    assert.equal(await sbx.pause(), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')

    // No connect: the command itself wakes it.
    const res = await sbx.commands.run(`cat /tmp/kept-across-pause && kill -0 ${sleeper.pid} && echo " and alive"`)
    assert.equal(res.stdout, 'still here and alive\n')
    assert.equal((await sbx.getInfo()).state, 'running')
  })

  it('pause keeps processes: after connect a counter loop counts on and a server answers', { timeout: 240_000 }, async (t) => {
    const sbx = await createSandbox(t, 'pause-keeps-processes')
    // Each count replaces the file whole (a read never sees it emptied).
    const counter = await sbx.commands.run(
      `sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done'`,
      { background: true },
    )
    const server = await sbx.commands.run('cd /tmp && exec python3 -m http.server 8000', { background: true })
    const host = sbx.getHost(8000)
    const served = () => requestAs(host, '/').then((r) => r.status === 200, () => false)
    await waitFor(served, { timeoutMs: 60_000, what: 'the server to answer' })
    const read = async (s) => Number((await s.commands.run('cat /tmp/c')).stdout.trim())
    // The loop's pace here: how long ten increments take.
    const start = await waitFor(async () => (await read(sbx)) || false, { what: 'the counter to start' })
    const t0 = Date.now()
    await waitFor(async () => (await read(sbx)) >= start + 10, { timeoutMs: 60_000, what: 'ten increments' })
    const tenSteps = Date.now() - t0

    const before = await read(sbx)
    assert.equal(await sbx.pause(), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    // Paused for thirty increments' worth of time: a loop that ran would
    // count past before + 30.
    const pausedAt = Date.now()
    const window = Math.max(2_000, 3 * tenSteps)
    await waitFor(() => Date.now() - pausedAt >= window, { timeoutMs: window + 60_000, what: 'the pause window' })

    const resumed = await Sandbox.connect(sbx.sandboxId)
    const after = await read(resumed)
    assert.ok(after - before < 10, `the counter went from ${before} to ${after} while paused for ${window} ms (ten steps take ${tenSteps} ms)`)
    await waitFor(async () => (await read(resumed)) >= after + 5, { timeoutMs: 60_000, what: 'the counter to count on' })
    const pids = (await resumed.commands.list()).map((p) => p.pid)
    assert.ok(pids.includes(counter.pid), `the counter loop ${counter.pid} is gone after resume: ${pids}`)
    assert.ok(pids.includes(server.pid), `the server ${server.pid} is gone after resume: ${pids}`)
    const res = await requestAs(host, '/')
    assert.equal(res.status, 200, res.body)
  })

  it("lifecycle onTimeout 'pause': the timeout pauses the sandbox, connect resumes its processes", { timeout: 180_000 }, async (t) => {
    const sbx = await createSandbox(t, 'auto-pause', { timeoutMs: 5_000, lifecycle: { onTimeout: 'pause' } })
    const loop = await sbx.commands.run(`sh -c 'while true; do sleep 1; done'`, { background: true })
    await waitFor(async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused', {
      timeoutMs: 60_000,
      intervalMs: 500,
      what: 'the timeout to pause the sandbox',
    })
    const resumed = await Sandbox.connect(sbx.sandboxId)
    const pids = (await resumed.commands.list()).map((p) => p.pid)
    assert.ok(pids.includes(loop.pid), `the background loop ${loop.pid} is gone after resume: ${pids}`)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
  })

  it('connect to a running sandbox only extends its life', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'connect-extends', { timeoutMs: 600_000 })
    const endIn = async () => (await Sandbox.getInfo(sbx.sandboxId)).endAt.getTime() - Date.now()

    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 })
    let left = await endIn()
    assert.ok(left > 540_000, `connect with 10 s cut the end to ${left} ms away; want the 600 s it had`)
    await Sandbox.connect(sbx.sandboxId) // the SDK's default timeout, 300 s
    left = await endIn()
    assert.ok(left > 540_000, `a plain connect cut the end to ${left} ms away`)

    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 1_200_000 })
    left = await endIn()
    assert.ok(left > 1_140_000 && left <= 1_205_000, `connect with 1200 s: end ${left} ms away, want about 1200 s`)
  })

  it('getMetrics reports disk and honours start and end', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'metrics')
    const [m] = await sbx.getMetrics()
    assert.ok(m, 'a running sandbox has a sample')
    assert.ok(m.memUsed > 0, `memUsed ${m.memUsed}`)
    // The sandbox's own disk: what it wrote over its image (0 when fresh)
    // against its limit, never the host's file system.
    assert.ok(m.diskUsed >= 0 && m.diskTotal > 0 && m.diskTotal >= m.diskUsed, `disk ${m.diskUsed} of ${m.diskTotal}`)
    const hour = 3_600_000
    const now = Date.now()
    assert.equal((await sbx.getMetrics({ start: new Date(now - hour), end: new Date(now + hour) })).length, 1)
    assert.deepEqual(await sbx.getMetrics({ start: new Date(now - 2 * hour), end: new Date(now - hour) }), [])
    assert.deepEqual(await sbx.getMetrics({ start: new Date(now + hour) }), [])
  })

  it('kill returns true once, then false; unknown ids give false', { timeout: 120_000 }, async (t) => {
    const sbx = await createSandbox(t, 'kill')
    assert.equal(await sbx.kill(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    assert.equal(await Sandbox.kill('sb-00000000deadbeef'), false)
    assert.equal(await Sandbox.kill('no-such-sandbox'), false)
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
    await assert.rejects(Sandbox.connect('sb-00000000deadbeef'), SandboxNotFoundError)
    await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
  })
})
