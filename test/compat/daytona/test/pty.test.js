// PTY sessions through the toolbox (/process/pty...): createPty over the
// create-connect WebSocket with env, input and output, resize, list and get,
// a second client reconnecting to the same shell, the exit code through
// wait(), and kill.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'

import { createSandbox, deleteQuietly, newClient, nonce, waitFor } from './helpers.js'

const daytona = newClient()

/** A terminal's output, decoded, and a way to wait for text in it. */
function collector() {
  const decoder = new TextDecoder()
  const c = {
    text: '',
    onData: (data) => {
      c.text += decoder.decode(data, { stream: true })
    },
    until: (needle, what = needle) =>
      waitFor(() => c.text.includes(needle), { timeoutMs: 30_000, intervalMs: 50, what: `terminal output ${what}` }),
  }
  return c
}

describe('pty', () => {
  let sb
  before(async () => {
    sb = await createSandbox(null, daytona, 'pty')
  }, { timeout: 180_000 })
  after(async () => {
    if (sb) await deleteQuietly(sb)
  })

  it('creates a terminal, resizes it, reconnects and reports the exit code', { timeout: 120_000 }, async () => {
    const id = `pty-${nonce()}`
    const out = collector()
    const pty = await sb.process.createPty({ id, cols: 80, rows: 24, envs: { PTY_FOO: 'bar' }, onData: out.onData })
    assert.ok(pty.isConnected())
    await pty.sendInput('echo "foo=$PTY_FOO"; stty size\n')
    await out.until('foo=bar')
    await out.until('24 80')

    const resized = await pty.resize(120, 40)
    assert.equal(resized.cols, 120)
    assert.equal(resized.rows, 40)
    await pty.sendInput('stty size; export KEPT=yes\n')
    await out.until('40 120')

    const info = await sb.process.getPtySessionInfo(id)
    assert.equal(info.id, id)
    assert.equal(info.active, true)
    assert.ok((await sb.process.listPtySessions()).some((s) => s.id === id), `${id} is listed`)

    // Disconnect; the shell lives on and another client attaches to it.
    await pty.disconnect()
    const again = collector()
    const pty2 = await sb.process.connectPty(id, { onData: again.onData })
    await pty2.sendInput('echo "kept=$KEPT"\n')
    await again.until('kept=yes')
    await pty2.sendInput('exit 7\n')
    const result = await pty2.wait()
    assert.equal(result.exitCode, 7)
    await waitFor(async () => !(await sb.process.getPtySessionInfo(id)).active, { what: 'the terminal to be inactive' })
  })

  it('kill ends the shell', { timeout: 60_000 }, async () => {
    const id = `pty-kill-${nonce()}`
    const pty = await sb.process.createPty({ id, onData: () => {} })
    await pty.kill()
    const result = await pty.wait()
    assert.equal(result.exitCode, 137)
    assert.equal(result.error, 'SIGKILL')
    await assert.rejects(sb.process.getPtySessionInfo(id))
  })
})
