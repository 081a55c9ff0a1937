// Process sessions through the toolbox (/process/session...): create, list,
// get, delete; synchronous commands that share the session's shell state; an
// asynchronous command polled to its end, its logs (plain and followed over
// the WebSocket with callbacks) and its stdin.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'

import { DaytonaNotFoundError } from '@daytonaio/sdk'

import { createSandbox, deleteQuietly, newClient, nonce, sh, waitFor, within } from './helpers.js'

const daytona = newClient()

/** Polls getSessionCommand until the command has an exit code; returns the command. */
function commandDone(sb, sessionId, cmdId, timeoutMs = 30_000) {
  return waitFor(
    async () => {
      const cmd = await sb.process.getSessionCommand(sessionId, cmdId)
      return cmd.exitCode !== undefined && cmd.exitCode !== null ? cmd : null
    },
    { timeoutMs, intervalMs: 100, what: `command ${cmdId} to finish` },
  )
}

describe('sessions', () => {
  let sb
  before(async () => {
    sb = await createSandbox(null, daytona, 'sessions')
  }, { timeout: 180_000 })
  after(async () => {
    if (sb) await deleteQuietly(sb)
  })

  it('creates, lists, gets and deletes a session', { timeout: 60_000 }, async () => {
    const sessionId = `s-${nonce()}`
    await sb.process.createSession(sessionId)

    const sessions = await sb.process.listSessions()
    assert.ok(Array.isArray(sessions), 'listSessions returns an array')
    const listed = sessions.find((s) => s.sessionId === sessionId)
    assert.ok(listed, `${sessionId} is listed`)
    assert.deepEqual(listed.commands ?? [], [])

    const got = await sb.process.getSession(sessionId)
    assert.equal(got.sessionId, sessionId)
    assert.deepEqual(got.commands, [])

    await sb.process.deleteSession(sessionId)
    await assert.rejects(sb.process.getSession(sessionId), (err) => {
      assert.ok(err instanceof DaytonaNotFoundError, `got ${err?.name}: ${err?.message}`)
      return true
    })
    assert.ok(!(await sb.process.listSessions()).some((s) => s.sessionId === sessionId))
  })

  it('getSession of an unknown session throws DaytonaNotFoundError', { timeout: 30_000 }, async () => {
    await assert.rejects(sb.process.getSession(`s-missing-${nonce()}`), DaytonaNotFoundError)
  })

  it('runs synchronous commands that share shell state', { timeout: 60_000 }, async (t) => {
    const sessionId = `s-${nonce()}`
    await sb.process.createSession(sessionId)
    t.after(() => sb.process.deleteSession(sessionId).catch(() => {}))

    const setup = await sb.process.executeSessionCommand(sessionId, { command: 'export SESSION_VAR=kept && cd /tmp' })
    assert.equal(typeof setup.cmdId, 'string')
    assert.match(setup.cmdId, /\S/)
    assert.equal(setup.exitCode, 0)

    const echoed = await sb.process.executeSessionCommand(sessionId, { command: 'echo "$SESSION_VAR $(pwd)"' })
    assert.equal(echoed.exitCode, 0)
    assert.equal(echoed.stdout.trimEnd(), 'kept /tmp')
    assert.equal(echoed.stderr.trimEnd(), '')
    assert.notEqual(echoed.cmdId, setup.cmdId)

    const failed = await sb.process.executeSessionCommand(sessionId, { command: 'echo to-out; echo to-err >&2; false' })
    assert.equal(failed.exitCode, 1)
    assert.equal(failed.stdout.trimEnd(), 'to-out')
    assert.equal(failed.stderr.trimEnd(), 'to-err')

    // The session lists the commands it ran, with their exit codes.
    const session = await sb.process.getSession(sessionId)
    assert.deepEqual(
      session.commands.map((c) => [c.id, c.exitCode]),
      [
        [setup.cmdId, 0],
        [echoed.cmdId, 0],
        [failed.cmdId, 1],
      ],
    )
    assert.equal(session.commands[1].command, 'echo "$SESSION_VAR $(pwd)"')
  })

  it('runs an async command: status while running, exit code, logs', { timeout: 90_000 }, async (t) => {
    const sessionId = `s-${nonce()}`
    await sb.process.createSession(sessionId)
    t.after(() => sb.process.deleteSession(sessionId).catch(() => {}))

    const gate = `/tmp/gate-${nonce()}`
    const command = `while [ ! -e ${gate} ]; do sleep 0.05; done; for i in 1 2 3; do echo out$i; echo err$i >&2; done; (exit 7)`
    const started = await sb.process.executeSessionCommand(sessionId, { command, runAsync: true })
    assert.equal(typeof started.cmdId, 'string')
    assert.match(started.cmdId, /\S/)
    assert.equal(started.exitCode ?? null, null, 'an async command has no exit code yet')

    // Still running: it waits for the gate.
    const running = await sb.process.getSessionCommand(sessionId, started.cmdId)
    assert.equal(running.id, started.cmdId)
    assert.equal(running.command, command)
    assert.equal(running.exitCode ?? null, null)

    await sh(sb, `touch ${gate}`)
    const done = await commandDone(sb, sessionId, started.cmdId)
    assert.equal(done.exitCode, 7)
    assert.equal(done.id, started.cmdId)

    const logs = await sb.process.getSessionCommandLogs(sessionId, started.cmdId)
    assert.equal(logs.stdout.trimEnd(), 'out1\nout2\nout3')
    assert.equal(logs.stderr.trimEnd(), 'err1\nerr2\nerr3')
    for (const line of ['out1', 'out2', 'out3', 'err1', 'err2', 'err3']) {
      assert.match(logs.output, new RegExp(`^${line}$`, 'm'), `output has ${line}`)
    }

    // Following the logs of a finished command replays them and returns.
    const out = []
    const err = []
    await within(
      20_000,
      'following the logs of a finished command',
      sb.process.getSessionCommandLogs(sessionId, started.cmdId, (c) => out.push(c), (c) => err.push(c)),
    )
    assert.equal(out.join('').trimEnd(), 'out1\nout2\nout3')
    assert.equal(err.join('').trimEnd(), 'err1\nerr2\nerr3')
  })

  it('follows the logs of a running command with callbacks until it ends', { timeout: 90_000 }, async (t) => {
    const sessionId = `s-${nonce()}`
    await sb.process.createSession(sessionId)
    t.after(() => sb.process.deleteSession(sessionId).catch(() => {}))

    const gate = `/tmp/gate-${nonce()}`
    const command =
      `echo before-gate; while [ ! -e ${gate} ]; do sleep 0.05; done; ` +
      'echo live-err >&2; sleep 0.3; echo live-out; sleep 0.3; echo "ünïcödé ✓"'
    const started = await sb.process.executeSessionCommand(sessionId, { command, runAsync: true })

    const out = []
    const err = []
    let sawBeforeGate
    const beforeGate = new Promise((resolve) => (sawBeforeGate = resolve))
    const following = sb.process.getSessionCommandLogs(
      sessionId,
      started.cmdId,
      (chunk) => {
        out.push(chunk)
        if (out.join('').includes('before-gate')) sawBeforeGate()
      },
      (chunk) => err.push(chunk),
    )
    // Output arrives while the command still runs (it is blocked on the gate).
    await within(20_000, 'the first output over the follow stream', Promise.race([beforeGate, following]))
    assert.equal((await sb.process.getSessionCommand(sessionId, started.cmdId)).exitCode ?? null, null)

    await sh(sb, `touch ${gate}`)
    await within(30_000, 'the follow stream to end with the command', following)
    assert.equal(out.join('').trimEnd(), 'before-gate\nlive-out\nünïcödé ✓')
    assert.equal(err.join('').trimEnd(), 'live-err')
    assert.equal((await commandDone(sb, sessionId, started.cmdId)).exitCode, 0)
  })

  it('sends input to a running command', { timeout: 60_000 }, async (t) => {
    const sessionId = `s-${nonce()}`
    await sb.process.createSession(sessionId)
    t.after(() => sb.process.deleteSession(sessionId).catch(() => {}))

    const started = await sb.process.executeSessionCommand(sessionId, {
      command: 'read -r line; echo "got:$line"',
      runAsync: true,
    })
    await sb.process.sendSessionCommandInput(sessionId, started.cmdId, 'hello input\n')
    const done = await commandDone(sb, sessionId, started.cmdId)
    assert.equal(done.exitCode, 0)
    const logs = await sb.process.getSessionCommandLogs(sessionId, started.cmdId)
    assert.equal(logs.stdout.trimEnd(), 'got:hello input')
  })
})
