// The event stream (Socket.IO at <api>/socket.io/): the SDK connects with
// its API key, state changes reach a Sandbox without polling, and a script
// exits promptly after its last call (a 404 here kept Node alive for about
// three minutes of socket.io reconnect timers).

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, it } from 'node:test'

import { createSandbox, isGone, labelsFor, newClient, waitFor } from './helpers.js'

const daytona = newClient()

/** Runs a node script; resolves {code, stdout, stderr, exitedAt} or rejects after limitMs. */
function runScript(path, env, limitMs) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (b) => (stdout += b))
    child.stderr.on('data', (b) => (stderr += b))
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`${path} did not exit within ${limitMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`))
    }, limitMs)
    child.on('exit', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr, exitedAt: Date.now() })
    })
  })
}

describe('events', () => {
  it('a script that creates, stops, gets, starts and deletes exits within 5 s of its last call', { timeout: 300_000 }, async () => {
    const script = fileURLToPath(new URL('./scripts/lifecycle-exits.mjs', import.meta.url))
    // The calls take seconds; against a refused stream the script hung for minutes.
    const res = await runScript(script, { LABELS: JSON.stringify(labelsFor('events-exit')) }, 120_000)
    assert.equal(res.code, 0, `exit code ${res.code}\nstderr: ${res.stderr}`)
    const line = res.stdout.trim().split('\n').at(-1)
    const out = JSON.parse(line)
    assert.equal(out.state, 'destroyed')
    const lag = res.exitedAt - out.done
    assert.ok(lag < 5_000, `the script exited ${lag} ms after its last call; want under 5000`)
    assert.equal(out.connected, true, 'the SDK event stream was not connected')
    assert.ok(await isGone(daytona, out.id))
  })

  it('a state change made elsewhere reaches a subscribed Sandbox without a call', { timeout: 300_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'events-push')
    await sb.getUserHomeDir() // subscribes sb to its events
    await waitFor(() => daytona.eventDispatcher?.isConnected, { timeoutMs: 30_000, what: 'the event stream to connect' })
    // A fresh client stops it: sb learns only through the event stream.
    const elsewhere = newClient()
    await (await elsewhere.get(sb.id)).stop(120)
    await waitFor(() => sb.state === 'stopped', { timeoutMs: 30_000, intervalMs: 50, what: 'the stop event' })
    await sb.start(120)
    assert.equal(sb.state, 'started')
  })
})
