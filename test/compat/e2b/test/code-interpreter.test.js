// @e2b/code-interpreter: runCode and contexts, served by the code-interpreter
// server inside a code-interpreter-v1 sandbox (port 49999, reached through
// E2B_SANDBOX_URL with the header E2b-Sandbox-Port: 49999).

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'

import { NotFoundError, Sandbox, SandboxError } from '@e2b/code-interpreter'

import { CODE_INTERPRETER, killQuietly, metadataFor, waitFor } from './helpers.js'

describe('code interpreter', { concurrency: true, timeout: 600_000 }, () => {
  let sbx
  before(async () => {
    // no template argument: the SDK's default must be code-interpreter-v1
    sbx = await Sandbox.create({ metadata: metadataFor('code-interpreter') })
  })
  after(() => sbx && killQuietly(sbx.sandboxId))

  it('uses the code-interpreter-v1 template by default', { timeout: 120_000 }, async () => {
    assert.equal((await sbx.getInfo()).templateId, CODE_INTERPRETER)
  })

  it('keeps state between calls', { timeout: 120_000 }, async () => {
    // its own context, so that the concurrent tests cannot interleave with it
    const context = await sbx.createCodeContext()
    const first = await sbx.runCode('x = 1', { context })
    assert.equal(first.error, undefined)
    assert.equal(first.text, undefined)
    const second = await sbx.runCode('x + 1', { context })
    assert.equal(second.error, undefined)
    assert.equal(second.text, '2')
    assert.equal(second.results.length, 1)
    assert.equal(second.results[0].isMainResult, true)
    assert.equal(second.executionCount, first.executionCount + 1)
  })

  it('runs in the default context without options', { timeout: 120_000 }, async () => {
    const exec = await sbx.runCode('import sys\nsys.version_info.major')
    assert.equal(exec.text, '3')
    assert.equal((await sbx.runCode('sys.version_info.major', { language: 'python' })).text, '3')
  })

  it('captures stdout and stderr, streaming them to callbacks', { timeout: 120_000 }, async () => {
    const streamed = []
    const exec = await sbx.runCode('import sys, time\nprint("hello")\ntime.sleep(0.3)\nprint("oops", file=sys.stderr)', {
      onStdout: (msg) => streamed.push(['out', msg.line]),
      onStderr: (msg) => streamed.push(['err', msg.line]),
    })
    assert.deepEqual(exec.logs.stdout, ['hello\n'])
    assert.deepEqual(exec.logs.stderr, ['oops\n'])
    assert.deepEqual(streamed, [['out', 'hello\n'], ['err', 'oops\n']])
    assert.equal(exec.error, undefined)
  })

  it('streams output while the code runs', { timeout: 120_000 }, async () => {
    // the code prints, then waits for a file that the test writes only once the
    // line has arrived: a server or proxy that buffers the response would hang
    const gate = `/tmp/gate-${randomUUID()}`
    const lines = []
    const running = sbx.runCode(
      `import os, time\nprint("first")\nwhile not os.path.exists(${JSON.stringify(gate)}): time.sleep(0.02)\nprint("second")`,
      { onStdout: (msg) => lines.push(msg.line) },
    )
    await waitFor(() => lines.length === 1, { what: 'the first line while the code runs' })
    await sbx.files.write(gate, '')
    const exec = await running
    assert.deepEqual(exec.logs.stdout, ['first\n', 'second\n'])
  })

  it('reports an error with name, value and traceback', { timeout: 120_000 }, async () => {
    const exec = await sbx.runCode('def divide(a, b):\n    return a / b\n\ndivide(1, 0)')
    assert.ok(exec.error, 'expected an error')
    assert.equal(exec.error.name, 'ZeroDivisionError')
    assert.equal(exec.error.value, 'division by zero')
    assert.match(exec.error.traceback, /ZeroDivisionError/)
    assert.match(exec.error.traceback, /divide/)
    assert.equal(exec.text, undefined)
  })

  it('applies envs for one execution', { timeout: 120_000 }, async () => {
    const code = 'import os\nos.environ.get("RUN_CODE_VAR", "unset")'
    assert.equal((await sbx.runCode(code, { envs: { RUN_CODE_VAR: 'set' } })).text, 'set')
    assert.equal((await sbx.runCode(code)).text, 'unset')
  })

  it('creates, lists, restarts and removes contexts', { timeout: 120_000 }, async () => {
    const context = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal(context.language, 'python')
    assert.equal(context.cwd, '/tmp')
    assert.ok(context.id)
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === context.id))

    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context })).text, '/tmp')
    await sbx.runCode('only_here = 1', { context })
    const elsewhere = await sbx.runCode('only_here')
    assert.equal(elsewhere.error?.name, 'NameError', 'contexts do not share state')

    await sbx.restartCodeContext(context)
    assert.equal((await sbx.runCode('only_here', { context })).error?.name, 'NameError')

    await sbx.removeCodeContext(context.id)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === context.id))
    await assert.rejects(sbx.runCode('1', { context }), NotFoundError)
  })

  it('rejects a language it does not run', { timeout: 120_000 }, async () => {
    const err = await sbx.runCode('1', { language: 'r' }).then(
      () => assert.fail('expected an error'),
      (e) => e,
    )
    assert.ok(err instanceof SandboxError, `got ${err}`)
    assert.match(err.message, /^400\b/)
  })
})
