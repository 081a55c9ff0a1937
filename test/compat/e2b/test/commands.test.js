// Commands and PTY (envd's process.Process service over Connect JSON). One
// sandbox for the file; the tests run in it concurrently.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'

import { CommandExitError, Sandbox } from 'e2b'

import { killQuietly, metadataFor, waitFor } from './helpers.js'

describe('commands', { concurrency: true, timeout: 600_000 }, () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create('base', { metadata: metadataFor('commands') })
  })
  after(() => sbx && killQuietly(sbx.sandboxId))

  it('runs a command and returns its output', { timeout: 120_000 }, async () => {
    const res = await sbx.commands.run('echo hello; echo oops >&2')
    assert.equal(res.exitCode, 0)
    assert.equal(res.stdout, 'hello\n')
    assert.equal(res.stderr, 'oops\n')
  })

  it('raises CommandExitError for a non-zero exit code', { timeout: 120_000 }, async () => {
    const err = await sbx.commands.run('echo partial; echo failing >&2; exit 3').then(
      () => assert.fail('expected CommandExitError'),
      (e) => e,
    )
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    assert.equal(err.stderr, 'failing\n')
  })

  it('honours cwd and envs', { timeout: 120_000 }, async () => {
    assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    const res = await sbx.commands.run('echo "$GREETING $OTHER"', { envs: { GREETING: 'hi', OTHER: 'there' } })
    assert.equal(res.stdout, 'hi there\n')
  })

  it('streams output through onStdout while the command runs', { timeout: 120_000 }, async () => {
    // the command prints, then waits for a file that the test writes only once
    // the first line has arrived: buffered output would never get that far
    const gate = `/tmp/gate-${randomUUID()}`
    const chunks = []
    const handle = await sbx.commands.run(`echo first; while [ ! -e ${gate} ]; do sleep 0.05; done; echo second`, {
      background: true,
      onStdout: (data) => chunks.push(data),
    })
    await waitFor(() => chunks.join('') === 'first\n', { what: 'the first line before the command ended' })
    await sbx.files.write(gate, '')
    const res = await handle.wait()
    assert.equal(res.stdout, 'first\nsecond\n')
    assert.equal(chunks.join(''), 'first\nsecond\n')
  })

  it('runs a command in the background, lists it and kills it', { timeout: 120_000 }, async () => {
    const handle = await sbx.commands.run('sleep 600', { background: true })
    assert.ok(handle.pid > 0)
    const listed = await sbx.commands.list()
    const entry = listed.find((p) => p.pid === handle.pid)
    assert.ok(entry, `pid ${handle.pid} not in ${JSON.stringify(listed)}`)
    assert.equal(entry.cmd, '/bin/bash')
    assert.deepEqual(entry.args, ['-l', '-c', 'sleep 600'])

    assert.equal(await handle.kill(), true)
    const err = await handle.wait().then(
      () => assert.fail('a killed command must not succeed'),
      (e) => e,
    )
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.notEqual(err.exitCode, 0)
    await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === handle.pid), {
      what: 'the killed process to leave the list',
    })
    assert.equal(await sbx.commands.kill(handle.pid), false, 'killing an unknown pid gives false')
  })

  it('sends stdin to a background command', { timeout: 120_000 }, async () => {
    const handle = await sbx.commands.run('read line; echo "got:$line"', { background: true, stdin: true })
    await sbx.commands.sendStdin(handle.pid, 'typed\n')
    const res = await handle.wait()
    assert.equal(res.stdout, 'got:typed\n')
  })

  it('connects to a running command', { timeout: 120_000 }, async () => {
    const gate = `/tmp/gate-${randomUUID()}`
    const handle = await sbx.commands.run(`while [ ! -e ${gate} ]; do sleep 0.05; done; echo done`, { background: true })
    const again = await sbx.commands.connect(handle.pid)
    await sbx.files.write(gate, '')
    const res = await again.wait()
    assert.equal(res.stdout, 'done\n')
    assert.equal((await handle.wait()).stdout, 'done\n')
  })

  it('drives a PTY: input, resize, exit', { timeout: 120_000 }, async () => {
    const decoder = new TextDecoder()
    let output = ''
    const pty = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (data) => {
        output += decoder.decode(data, { stream: true })
      },
    })
    assert.ok(pty.pid > 0)
    const type = (text) => sbx.pty.sendInput(pty.pid, new TextEncoder().encode(text))

    // the terminal echoes input, so look for what only the shell's output contains
    await type('stty size; echo "tty=$TERM sum=$((6*7))"\n')
    await waitFor(() => output.includes('sum=42'), { what: 'the PTY to run a command' })
    assert.match(output, /24 80/)
    assert.match(output, /tty=xterm-256color/)

    await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
    await type('stty size\n')
    await waitFor(() => output.includes('30 100'), { what: 'the PTY to report its new size' })

    await type('exit 0\n')
    const res = await pty.wait()
    assert.equal(res.exitCode, 0)
  })
})
