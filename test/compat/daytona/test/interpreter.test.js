// The code interpreter (/process/interpreter/...): runCode over the execute
// WebSocket with streamed stdout/stderr callbacks, errors, state kept in the
// default context and apart in a created one, a timeout as
// DaytonaTimeoutError; and process.codeRun in JavaScript and TypeScript
// sandboxes.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'

import { DaytonaTimeoutError } from '@daytonaio/sdk'

import { createSandbox, deleteQuietly, newClient } from './helpers.js'

const daytona = newClient()

describe('code interpreter', () => {
  let sb
  before(async () => {
    sb = await createSandbox(null, daytona, 'interpreter')
  }, { timeout: 180_000 })
  after(async () => {
    if (sb) await deleteQuietly(sb)
  })

  it('runs code with streamed output, errors and kept state', { timeout: 120_000 }, async () => {
    const seen = { stdout: '', stderr: '', errors: [] }
    const r = await sb.codeInterpreter.runCode('import sys\nx = 20\nprint("out")\nprint("err", file=sys.stderr)', {
      onStdout: (m) => { seen.stdout += m.output },
      onStderr: (m) => { seen.stderr += m.output },
    })
    assert.equal(r.stdout, 'out\n')
    assert.equal(r.stderr, 'err\n')
    assert.equal(r.error, undefined)
    assert.equal(seen.stdout, 'out\n')
    assert.equal(seen.stderr, 'err\n')

    const again = await sb.codeInterpreter.runCode('print(x * 2)')
    assert.equal(again.stdout, '40\n')

    const failed = await sb.codeInterpreter.runCode('raise KeyError("nope")', { onError: (e) => seen.errors.push(e) })
    assert.equal(failed.error?.name, 'KeyError')
    assert.match(failed.error?.traceback ?? '', /KeyError/)
    assert.equal(seen.errors.length, 1)
  })

  it('keeps created contexts apart, lists and deletes them', { timeout: 120_000 }, async () => {
    const ctx = await sb.codeInterpreter.createContext('/tmp')
    assert.equal(ctx.cwd, '/tmp')
    assert.equal(ctx.language, 'python')
    const r = await sb.codeInterpreter.runCode('import os\nv = 1\nprint(os.getcwd(), "x" in globals())', { context: ctx })
    assert.equal(r.stdout, '/tmp False\n')
    assert.ok((await sb.codeInterpreter.listContexts()).some((c) => c.id === ctx.id))
    await sb.codeInterpreter.deleteContext(ctx)
    assert.ok(!(await sb.codeInterpreter.listContexts()).some((c) => c.id === ctx.id))
    await assert.rejects(sb.codeInterpreter.runCode('print(1)', { context: ctx }))
  })

  it('a timeout is DaytonaTimeoutError and the context lives on', { timeout: 120_000 }, async () => {
    await assert.rejects(sb.codeInterpreter.runCode('k = "kept"\nimport time\ntime.sleep(60)', { timeout: 1 }), DaytonaTimeoutError)
    const r = await sb.codeInterpreter.runCode('print(k)')
    assert.equal(r.stdout, 'kept\n')
  })
})

describe('codeRun in other languages', () => {
  for (const [language, code, want] of [
    ['javascript', 'console.log(process.argv.slice(1).join("+"), 6 * 7)', 'a+b 42\n'],
    ['typescript', 'const n: number = 6;\ntype T = { k: string }\nconst t: T = { k: process.argv.slice(1).join("+") };\nconsole.log(t.k, n * 7)', 'a+b 42\n'],
  ]) {
    it(`runs ${language}`, { timeout: 180_000 }, async (t) => {
      const sb = await createSandbox(t, daytona, `coderun-${language}`, { language })
      const r = await sb.process.codeRun(code, { argv: ['a', 'b'] })
      assert.equal(r.exitCode, 0, r.result)
      assert.equal(r.result, want)
    })
  }
})
