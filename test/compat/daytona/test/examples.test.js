// What Daytona's own TypeScript examples (daytonaio/daytona,
// examples/typescript) do, each case the smallest form of a call sequence
// that failed there against sandboxd. Written by us; the examples are not
// copied.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { DaytonaError, DaytonaNotFoundError } from '@daytonaio/sdk'

import { createSandbox, newClient, sh } from './helpers.js'

const daytona = newClient()

describe('examples', () => {
  // file-operations: every path is "~/project-files/…". createFolder made
  // a directory literally named "~" under the home, searchFiles found
  // nothing and setFilePermissions said the file did not exist, while
  // uploads (which the agent resolves) went to the home.
  it('"~" paths mean the home on every file and git route', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'examples-tilde')
    await sb.fs.createFolder('~/project-files', '700')
    await sb.fs.uploadFile(Buffer.from('{"debug": true}\n'), '~/project-files/config.json')
    assert.equal(await sh(sb, 'test -e "$HOME/~" && echo stray || echo none'), 'none\n')
    // find -printf, not stat or ls: gVisor's statx (Debian's runsc 20221219)
    // refuses AT_NO_AUTOMOUNT, which coreutils 9 always passes (EINVAL).
    assert.equal(await sh(sb, "find /home/daytona/project-files -maxdepth 0 -printf '%m\\n'"), '700\n')

    const found = await sb.fs.searchFiles('~/project-files', '*.json')
    assert.deepEqual(found.files, ['/home/daytona/project-files/config.json'])
    const matches = await sb.fs.findFiles('~/project-files', 'debug')
    assert.deepEqual(matches.map((m) => [m.file, m.line]), [['/home/daytona/project-files/config.json', 1]])

    await sb.fs.setFilePermissions('~/project-files/config.json', { mode: '600' })
    assert.equal(await sh(sb, "find /home/daytona/project-files/config.json -maxdepth 0 -printf '%m\\n'"), '600\n')

    await sh(sb, 'git init -q /home/daytona/repo && touch /home/daytona/repo/new.txt')
    const status = await sb.git.status('~/repo')
    assert.deepEqual(status.fileStatus.map((f) => f.name), ['new.txt'])
    await sb.git.clone('/home/daytona/repo', '~/clone')
    assert.equal(await sh(sb, 'test -d /home/daytona/clone/.git && echo cloned'), 'cloned\n')
  })
})

describe('examples: interpreter', () => {
  // exec-command's statefulCodeInterpreter prints each onStdout message
  // behind a "[STDOUT] " prefix: print() came as "text" and then "\n", and
  // a NameError's traceback showed the worker's own frame.
  it('runCode output is line-buffered and tracebacks show the cell only', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'examples-interp')
    const chunks = []
    const r = await sb.codeInterpreter.runCode("print('one')\nprint('two')", { onStdout: (m) => chunks.push(m.output) })
    assert.equal(r.stdout, 'one\ntwo\n')
    assert.equal(chunks.join(''), 'one\ntwo\n')
    for (const c of chunks) assert.match(c, /^(?:[^\n]+\n)+$/, `a message is whole lines: ${JSON.stringify(chunks)}`)

    const failed = await sb.codeInterpreter.runCode('x = 1\nprint(undefined_name)')
    assert.equal(failed.error?.name, 'NameError')
    assert.equal(
      failed.error?.traceback,
      'Traceback (most recent call last):\n  File "<stdin>", line 2\n    print(undefined_name)\n' +
        "NameError: name 'undefined_name' is not defined\n",
    )
  })
})

/** Asserts that err is a 501 refusal whose message matches re, not a 404. */
function refused(re) {
  return (err) => {
    assert.ok(err instanceof DaytonaError, `got ${err?.name}: ${err?.message}`)
    assert.ok(!(err instanceof DaytonaNotFoundError), `a 404: ${err.message}`)
    assert.equal(err.statusCode, 501, err.message)
    assert.match(err.message, re)
    return true
  }
}

describe('examples: refusals', () => {
  // git-lsp goes on to createLspServer(...).start(): that was a 404 "no
  // route", which the SDK raises as DaytonaNotFoundError, as if the sandbox
  // were gone. So were the other sandbox calls sandboxd does not serve.
  it('LSP, computer use, other git calls, pause, resize, SSH and signed previews are 501s that say so', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'examples-refusals')
    const lsp = await sb.createLspServer('typescript', 'project')
    await assert.rejects(lsp.start(), refused(/language servers/))
    await assert.rejects(lsp.documentSymbols('project/index.ts'), refused(/language servers/))
    await assert.rejects(sb.computerUse.start(), refused(/computer use/))
    await assert.rejects(sb.git.add('~/repo', ['a.txt']), refused(/git operation/))
    await assert.rejects(sb.git.branches('~/repo'), refused(/git operation/))
    await assert.rejects(sb.pause(), refused(/pausing/))
    await assert.rejects(sb.resize({ cpu: 2 }), refused(/resizing/))
    await assert.rejects(sb.createSshAccess(60), refused(/SSH/))
    await assert.rejects(sb.getSignedPreviewUrl(3000), refused(/signed preview/))
    assert.equal((await daytona.get(sb.id)).state, 'started', 'the sandbox is untouched')
  })
})

describe('examples: streams', () => {
  // file-operations' streamed download printed "downloaded 118 / ? bytes":
  // a bulk-download part had no Content-Length, the SDK's totalBytes.
  it('downloadFileStream reports the file size as totalBytes', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'examples-stream')
    const content = Buffer.from('streamed '.repeat(1000))
    await sb.fs.uploadFile(content, 'streamed.txt')
    const progress = []
    const stream = await sb.fs.downloadFileStream('streamed.txt', { onProgress: (p) => progress.push(p) })
    const chunks = []
    for await (const chunk of stream) chunks.push(chunk)
    assert.ok(Buffer.concat(chunks).equals(content), 'the bytes are the file')
    assert.ok(progress.length > 0, 'progress was reported')
    for (const p of progress) assert.equal(p.totalBytes, content.length)
    assert.equal(progress.at(-1).bytesReceived, content.length)
  })
})
