// sandbox.process.executeCommand and sandbox.process.codeRun through the
// toolbox (<toolboxProxyUrl>/<id>/process/execute and /process/code-run).

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'

import { DaytonaTimeoutError } from '@daytonaio/sdk'

import { createSandbox, deleteQuietly, newClient, nonce, sh, waitFor } from './helpers.js'

const daytona = newClient()

describe('process', () => {
  let sb
  before(async () => {
    sb = await createSandbox(null, daytona, 'process')
  }, { timeout: 180_000 })
  after(async () => {
    if (sb) await deleteQuietly(sb)
  })

  describe('executeCommand', () => {
    it('returns the output and exit code 0', { timeout: 60_000 }, async () => {
      const res = await sb.process.executeCommand('echo hello')
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, 'hello\n')
      assert.equal(res.artifacts.stdout, 'hello\n')
    })

    it('runs the command through a shell (pipes, &&, quotes, $vars)', { timeout: 60_000 }, async () => {
      const res = await sb.process.executeCommand(`X=abc && echo "$X" | tr a-c x-z && echo 'single $X' "double $X"`)
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, 'xyz\nsingle $X double abc\n')
    })

    it('returns a non-zero exit code with stdout and stderr combined in order', { timeout: 60_000 }, async () => {
      const res = await sb.process.executeCommand('echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3')
      assert.equal(res.exitCode, 3)
      assert.equal(res.result, 'out1\nerr1\nout2\nerr2\n')
    })

    it('reports a missing program as exit code 127, not as an HTTP error', { timeout: 60_000 }, async () => {
      const res = await sb.process.executeCommand('no-such-program-here')
      assert.equal(res.exitCode, 127)
      assert.match(res.result, /not found/)
    })

    it('runs in cwd', { timeout: 60_000 }, async () => {
      const dir = `/tmp/dt-cwd-${nonce()}`
      await sh(sb, `mkdir -p ${dir}`)
      const res = await sb.process.executeCommand('pwd', dir)
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, `${dir}\n`)
      const res2 = await sb.process.executeCommand('ls', '/etc')
      assert.match(res2.result, /^os-release$/m)
    })

    it('passes env to the command only', { timeout: 60_000 }, async () => {
      const res = await sb.process.executeCommand('echo "$A|$B|$HOME_SET"', undefined, {
        A: '1',
        B: 'two words; $(not run)',
        HOME_SET: 'yes',
      })
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, '1|two words; $(not run)|yes\n')
      // env is per command: the next one does not see it.
      const res2 = await sb.process.executeCommand('echo "[${A:-unset}]"')
      assert.equal(res2.result, '[unset]\n')
    })

    it('without cwd runs in the work dir, as the user whose home getUserHomeDir names', { timeout: 60_000 }, async () => {
      const workDir = await sb.getWorkDir()
      const homeDir = await sb.getUserHomeDir()
      assert.match(workDir, /^\//)
      assert.match(homeDir, /^\//)
      assert.equal((await sb.process.executeCommand('pwd')).result, `${workDir}\n`)
      assert.equal((await sb.process.executeCommand('echo "$HOME"')).result, `${homeDir}\n`)
      assert.equal((await sb.process.executeCommand('whoami')).result, `${sb.user}\n`)
    })

    it('cwd and env together', { timeout: 60_000 }, async () => {
      const res = await sb.process.executeCommand('echo "$(pwd) $WHERE"', '/tmp', { WHERE: 'here' })
      assert.equal(res.result, '/tmp here\n')
    })

    it('passes multi-line scripts and non-ASCII output through unchanged', { timeout: 60_000 }, async () => {
      const res = await sb.process.executeCommand('for i in 1 2 3; do\n  echo "zeile $i: grüße ✓"\ndone')
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, 'zeile 1: grüße ✓\nzeile 2: grüße ✓\nzeile 3: grüße ✓\n')
    })

    it('a command past its timeout fails with DaytonaTimeoutError and is killed', { timeout: 60_000 }, async () => {
      const started = Date.now()
      await assert.rejects(sb.process.executeCommand('sleep 27', undefined, undefined, 1), (err) => {
        assert.ok(err instanceof DaytonaTimeoutError, `got ${err?.name}: ${err?.message}`)
        assert.equal(err.statusCode, 408)
        return true
      })
      const elapsed = Date.now() - started
      assert.ok(elapsed < 15_000, `the 1 s timeout took ${elapsed} ms to fire`)
      // Nothing of it keeps running.
      await waitFor(async () => (await sb.process.executeCommand('pgrep -x sleep')).exitCode === 1, {
        timeoutMs: 10_000,
        what: 'the timed-out sleep to be killed',
      })
    })
  })

  describe('codeRun (python)', () => {
    it('runs a script: print output; a bare expression prints nothing', { timeout: 60_000 }, async () => {
      const res = await sb.process.codeRun('x = 6 * 7\nprint("answer", x)\nx * 2\n')
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, 'answer 42\n')
      assert.equal(res.artifacts.stdout, 'answer 42\n')
      assert.deepEqual(res.artifacts.charts, [])
    })

    it('passes argv and env', { timeout: 60_000 }, async () => {
      const res = await sb.process.codeRun('import os, sys\nprint(sys.argv[1:], os.environ["CR_VAR"])', {
        argv: ['first', 'two words'],
        env: { CR_VAR: 'from env' },
      })
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, "['first', 'two words'] from env\n")
    })

    it('reports the exit code and the traceback of a failing script', { timeout: 60_000 }, async () => {
      const exited = await sb.process.codeRun('import sys\nprint("before")\nsys.exit(4)')
      assert.equal(exited.exitCode, 4)
      assert.equal(exited.result, 'before\n')

      const raised = await sb.process.codeRun('print("start", flush=True)\n1 / 0')
      assert.equal(raised.exitCode, 1)
      assert.match(raised.result, /^start\n/)
      assert.match(raised.result, /ZeroDivisionError/)
    })

    it('keeps quotes, backslashes and non-ASCII in the code intact', { timeout: 60_000 }, async () => {
      const res = await sb.process.codeRun(`s = 'it\\'s "quoted" \\\\ ${'$'}HOME ✓'\nprint(s)`)
      assert.equal(res.exitCode, 0)
      assert.equal(res.result, `it's "quoted" \\ $HOME ✓\n`)
    })
  })
})
